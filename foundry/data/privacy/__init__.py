"""Privacy: what keeps personal data and secrets out of a dataset. The scrubber replaces them while documents are
cleaned; the data gate asks the scrubber and a second, independent detector, and stops on what either finds.

- `pii`: the personal-data and secret scrubber (find, scrub, mask, example)
- `pii_patterns`: what each of the scrubber's detectors matches, and the placeholders it writes
- `pii_checks`: the checks behind the detectors (Luhn, mod 97, entropy, decoding)
- `pii_tokens`: vendor token prefixes and the words that name a secret
- `pii_ids`: national identity numbers and their checks
- `secret_scan`: the gate's second detector, which shares no code with the scrubber (its own number checks too)
"""
