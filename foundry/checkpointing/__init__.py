"""Stage D: checkpoints that survive failure and resume exactly (`manifest`, `writer`, `resume`)."""
