"""False stops of the validation gate on real text the project does not ship (#55 point 10).

    python bench/detector_false_stops.py [--python N] [--show N]

Reads this machine's package documentation (`/usr/share/doc/*/changelog*` and every `.txt` and `.md`
under `/usr/share/doc`, gunzipped where they end in `.gz`) and N Python sources of the running
interpreter's site-packages (every k-th of them in path order, default 2000: real code, full of
`password=` and `token=` that are no secrets). Each distinct document (by content) goes through what
`foundry prepare` and `foundry validate` do with it: `clean.normalise`, the scrubber with every kind
(`pii.scrub`, the default `data.pii`), then both of the gate's detectors on what the scrubber left
(`pii.find` and the independent `secret_scan`). A document either flags is one the gate would stop the
run on: a false stop, unless a person reads the flag and finds a real secret (this machine's docs
hold none). Each flag is listed with its file and the text it matched; the scrubber's replacements are
counted by kind (each one is text the model never sees, so they are worth a look too).

The last line is the headline: documents flagged of documents read, by kind.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from foundry.data.privacy import pii, secret_scan
from foundry.pretrain.clean import normalise

DOCS = Path("/usr/share/doc")
MAX_BYTES = 4_000_000  # larger documents are rare and slow; none here is above it


def documentation() -> Iterator[Path]:
    seen = set()
    for pattern in ("*/changelog*", "**/*.txt", "**/*.md", "**/*.txt.gz", "**/*.md.gz"):
        for path in sorted(DOCS.glob(pattern)):
            if path.is_file() and path not in seen:
                seen.add(path)
                yield path


def python_sources(count: int) -> list[Path]:
    every = sorted(Path(sysconfig.get_paths()["purelib"]).rglob("*.py"))
    step = max(1, len(every) // max(count, 1))
    return every[::step][:count]


def read(path: Path) -> str | None:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if len(raw) > MAX_BYTES or b"\0" in raw[:4096]:
        return None
    return raw.decode("utf-8", errors="replace")


def flags(text: str) -> list[tuple[str, str]]:
    """(kind, matched text) for each thing the gate finds in the scrubbed text."""
    found = [(span.kind, text[span.start : span.end]) for span in pii.find(text)]
    flat = secret_scan.joined(text)
    return found + [(f.kind, flat[f.start : f.end]) for f in secret_scan.scan(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", type=int, default=2000, help="site-packages sources to read")
    parser.add_argument("--show", type=int, default=200, help="flags to list at most")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    digests, documents, total_bytes = set(), 0, 0
    flagged: Counter = Counter()
    scrubbed: Counter = Counter()
    listed = 0
    for path in [*documentation(), *python_sources(args.python)]:
        raw = read(path)
        if raw is None or not raw.strip():
            continue
        digest = hashlib.sha256(raw.encode("utf-8", errors="replace")).digest()
        if digest in digests:
            continue
        digests.add(digest)
        documents += 1
        total_bytes += len(raw)
        text, replaced = pii.scrub(normalise(raw))
        scrubbed.update(replaced)
        found = flags(text)
        for kind in {kind for kind, _ in found}:
            flagged[kind] += 1
        if found:
            flagged["documents"] += 1
        for kind, matched in found:
            if listed < args.show:
                print(f"FLAG {kind:18} {path}: {matched[:120]!r}")
                listed += 1
    elapsed = time.perf_counter() - started
    print(f"read {documents:,} distinct documents, {total_bytes / 1e6:.1f} MB, in {elapsed:.0f} s")
    print("scrubber replacements by kind:", dict(scrubbed.most_common()))
    by_kind = ", ".join(f"{kind} {n}" for kind, n in sorted(flagged.items()) if kind != "documents") or "none"
    print(f"detector_false_stops: {flagged['documents']:,} of {documents:,} documents flagged ({by_kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
