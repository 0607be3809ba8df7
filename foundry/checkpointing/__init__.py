"""Stage D: checkpoints that survive failure and resume exactly.

- `manifest`: a checkpoint folder's manifest: which files are checkpoints, of which step, with which sha256
- `writer`: writing checkpoints from Lightning, atomically, listed in the manifest, optionally in the background
- `resume`: where unfinished training lives, and which checkpoint a re-run or retry resumes from
- `world`: a checkpoint resumed at another world size, its global batch kept by the accumulation
"""
