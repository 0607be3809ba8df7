"""Stage A, data acquisition and hydration, shared by every workload: sources in, a validated, versioned, hydrated
dataset out. Each workload's own preparation lives with it (documents: `foundry.pretrain.prepare`; chat records:
`foundry.align.prepare`; images: `foundry.vision.prepare`).

- `acquire`: find the sources' files and fingerprint them (the source manifest)
- `remote`: http(s) and S3 sources mirrored into `$FOUNDRY_HOME/sources/`, asked again every time
- `credentials`: credentials of http(s) sources (URL userinfo or netrc), sent and never written
- `globbing`: glob sources without following links out of the pattern's root or round a loop
- `archives`: unpacking an archive source without trusting the archive
- `limits`: how far a compressed source may inflate (archives and `.gz` files)
- `formats`: documents and records out of text, code, `.jsonl` and `.parquet` files (any `.gz`), one at a time
- `privacy`: personal data and secrets: the scrubber (`pii` and its detectors) and the gate's second,
  independent detector (`secret_scan`)
- `quality`: Gopher- and C4-style quality rules (the audit names them)
- `ledger`: sticky splits: the ledger of which split each document was given
- `audit`: per rule, the documents or records removed or changed, with examples
- `prepared`: what a workload's `prepare` made (the manifest and its lineage counts)
- `manifest`: a prepared dataset's `manifest.json` as one typed value that owns the file
- `progress`: preparation's progress for the orchestrator
- `validate`: the gate: the Great Expectations suites of the workload whose data a folder holds
- `validate_gx`: the Great Expectations suites' machinery, and the data docs of a failure
- `purged`: the marks a purge leaves on the data versions it removed, read by every command
- `validation_report`: what a data gate found, as one typed value that owns its file
- `versioning`: DVC makes the prepared dataset a content-addressed version
- `remote_reach`: whether a DVC remote answers, asked with backoff before a pull
- `hydrate`: pull exactly one data version onto this node and check every file
"""
