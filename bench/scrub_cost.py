"""The scrubber's cost against an earlier commit's, on the same text: `clean.normalise` then `pii.scrub` with every
detector (the default `data.pii`), over the interpreter's standard library sources (tests and idlelib left out).

    python bench/scrub_cost.py [--against COMMIT] [--rounds 3]

`--against` (default 80850a5, before issue #55's new kinds) is checked out in a temporary git worktree; each round
runs both trees in fresh processes, alternating (ABBA), and times the scrubbing alone (CPU seconds of the process,
the files already read). Each run prints a digest of the scrubbed text, so a change in what is scrubbed shows. The
last line: the median CPU seconds of each and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE_RUN = """
import hashlib, sysconfig, time
from pathlib import Path
try:
    from foundry.pretrain.clean import normalise
except ImportError:  # before #54 moved the text-only data stage
    from foundry.data.clean import normalise
try:
    from foundry.data.privacy.pii import scrub
except ImportError:  # before the privacy package
    from foundry.data.pii import scrub
root = Path(sysconfig.get_paths()["stdlib"])
skip = {"test", "tests", "idlelib", "site-packages"}
files = sorted(p for p in root.rglob("*.py") if not skip & set(p.parts))
texts = [p.read_text(errors="replace") for p in files]
start = time.process_time()
digest = hashlib.sha256()
for text in texts:
    digest.update(scrub(normalise(text))[0].encode())
print(len(files), sum(map(len, texts)), time.process_time() - start, digest.hexdigest()[:16])
"""


def one_run(tree: Path) -> tuple[int, int, float, str]:
    out = subprocess.run(
        [sys.executable, "-c", ONE_RUN], cwd=tree, env={"PYTHONPATH": str(tree)}, capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(f"{tree}: {out.stderr.strip()}")
    files, chars, seconds, digest = out.stdout.split()
    return int(files), int(chars), float(seconds), digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="80850a5")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old), args.against], cwd=ROOT, check=True)
        try:
            times: dict[str, list[float]] = {"now": [], "then": []}
            for round_ in range(args.rounds):
                order = [("now", ROOT), ("then", old)]
                for name, tree in order if round_ % 2 == 0 else order[::-1]:
                    files, chars, seconds, digest = one_run(tree)
                    times[name].append(seconds)
                    print(f"{name:4s} {files} files, {chars / 1e6:.1f} M characters: {seconds:.2f} s CPU, {digest}")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=True)
    now, then = statistics.median(times["now"]), statistics.median(times["then"])
    print(f"scrub_cost: {now:.2f} s CPU now, {then:.2f} s at {args.against}: {now / then:.2f}x")


if __name__ == "__main__":
    main()
