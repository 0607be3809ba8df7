"""Stage E, the registry.

- `versions`: publishing a version as one unit, its aliases, fail-closed look-ups
- `gate`: the gates' I/O: what each rule in `foundry.gates` decides on, gathered from the registry and holdouts
- `tags`: values read back from a version's tags, checked before anything uses them
- `lineage`: from a registered model back to its run, data version, source, code and config
- `parent`: what a run builds on: the champion and its data, or any version a run starts from
"""
