"""Stage A, data acquisition and hydration: sources in, a validated, versioned, hydrated dataset out.

- `acquire`: find the sources' files and fingerprint them (the source manifest)
- `remote`: http(s) and S3 sources mirrored into `$FOUNDRY_HOME/sources/`, asked again every time
- `credentials`: credentials of http(s) sources (URL userinfo or netrc), sent and never written
- `globbing`: glob sources without following links out of the pattern's root or round a loop
- `archives`: unpacking an archive source without trusting the archive
- `limits`: how far a compressed source may inflate (archives and `.gz` files)
- `formats`: documents out of text, code, `.jsonl` and `.parquet` files (any `.gz`), one at a time
- `clean`: decode, normalise, scrub, filter, de-duplicate and split documents, streaming
- `privacy`: personal data and secrets: the scrubber (`pii` and its detectors) and the gate's second,
  independent detector (`secret_scan`)
- `quality`: Gopher- and C4-style quality rules
- `dedup`: exact de-duplication by content hash, near by MinHash LSH
- `ledger`: sticky splits: the ledger of which split each document was given
- `audit`: per rule, the documents removed or changed, with examples
- `shards`: the byte-level BPE trained on the train split, and the token shards
- `prepare`: source manifest in, a self-describing dataset directory out
- `manifest`: a prepared dataset's `manifest.json` as one typed value that owns the file
- `progress`: preparation's progress for the orchestrator
- `validate`: the gate, Great Expectations suites over documents, shards, splits and the ledger
- `validate_gx`: the Great Expectations suites themselves, and the data docs of a failure
- `purged`: the marks a purge leaves on the data versions it removed, read by every command
- `validation_report`: what a data gate found, as one typed value that owns its file
- `versioning`: DVC makes the prepared dataset a content-addressed version
- `remote_reach`: whether a DVC remote answers, asked with backoff before a pull
- `hydrate`: pull exactly one data version onto this node and check every file
"""
