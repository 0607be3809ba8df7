"""`python -m foundry.cli`: the `foundry` command, as the training nodes and the SLURM job call it."""

import sys

from foundry.cli import main

if __name__ == "__main__":
    sys.exit(main())
