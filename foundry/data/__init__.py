"""Stage A, data: acquire sources, clean them (formats, PII, quality, de-duplication, audit), split and
tokenize (`prepare`, `shards`), gate (`validate`, Great Expectations), version (DVC) and hydrate."""
