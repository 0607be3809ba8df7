"""The vision workload: labelled images through the same chain as text (acquire, prepare, shards)."""
