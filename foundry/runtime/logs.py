"""Each log line once, and none that says nothing: how third-party loggers meet the process's own handlers.

Lightning (when imported before logging was set up) and DVC (always, on import) attach console handlers of
their own to their loggers and still propagate to the root logger, where Prefect's console handler prints
the same line again. Where the root logger has a handler, theirs go, so each line is printed once, by the
root's handler (and reaches the Prefect run through its API handler where the logger is one of Prefect's
extra loggers). Lightning's tip advertising a hosted service is dropped.
"""

from __future__ import annotations

import logging
import warnings

# Loggers whose libraries attach console handlers of their own.
OWN_HANDLERS = ("lightning", "lightning.pytorch", "lightning.fabric", "dvc", "dvc_objects", "dvc_data")
ADVERTS = ("litlogger",)


class _NoAdverts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not any(word in message for word in ADVERTS)


_NO_ADVERTS = _NoAdverts()


def route_library_logs() -> None:
    """Call where a flow starts, and after importing Lightning or DVC; idempotent."""
    if logging.getLogger().handlers:
        # Prefect's root logger stops at WARNING, and our loggers set no level of their own: INFO (each drop
        # by the cleaning filters, resumes, re-scoring) would reach no handler at all.
        logging.getLogger("foundry").setLevel(logging.INFO)
        for name in OWN_HANDLERS:
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                if type(handler).__module__.split(".")[0] in ("logging", "dvc"):  # theirs, not Prefect's API handler
                    logger.removeHandler(handler)
            logger.propagate = True
            if name.startswith("dvc"):  # "Initialized DVC repository.", "Updating lock file": routine, each time
                logger.setLevel(logging.WARNING)
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if _NO_ADVERTS not in rank_zero.filters:
        rank_zero.addFilter(_NO_ADVERTS)


def quiet_known_warnings() -> None:
    """Two warnings nothing a user does mends, each silenced by its message alone. Lightning 2.6 builds a torch
    `LeafSpec` that torch 2.13 deprecates, once per fit; it goes away with a Lightning release. And on any machine
    with SLURM's `srun` (a cluster's login node, infra/slurm/local-cluster.sh), every fresh fit advises launching
    under `srun`: Foundry's ranks run under torchrun's agent with Lightning's plain environment, which
    infra/slurm/train.sbatch starts with `srun`, one agent per node."""
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")
