"""zpaq -m4 and -m5 as baselines (#58): their agreement with zpaq's own CLI, and what they add to every run.

    python bench/zpaq_baselines.py PREPARED [--slice 1048576] [--rounds 1]

PREPARED is a prepared dataset folder (train.jsonl, holdout.jsonl), e.g. `make run`'s
`$FOUNDRY_HOME/workspace/prepared`. First, when Debian's `zpaq` (7.15) is on PATH, the conditional cost of a slice
of the holdout after a slice of the training text (the last three quarters of `--slice` bytes of it, then the
first quarter of the holdout): `zpaq a -mN -t1` archives against the `zpaq` package's `compress` with the text
model `compressors.zpaq_method` names, and with the binding's generic model (`hints=False`). Then
`compression_baselines` on the whole data, each set of baselines in a fresh process (its own peak memory),
alternating without zpaq and with -m4 (ABBA, `--rounds` times), then once with -m4 and -m5. The last line is the
headline: both zpaq scores and the CPU seconds -m4 adds to a run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ONE_SET = """
import json, resource, sys, time
from pathlib import Path
from foundry.pretrain.compressors import compression_baselines
wall, cpu = time.perf_counter(), time.process_time()
scores = compression_baselines(Path(sys.argv[1]), 8 << 20, 16 << 20, json.loads(sys.argv[2]))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
print(json.dumps({"scores": scores, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                  "peak_mib": peak}))
"""


def slices(prepared: Path, size: int) -> tuple[bytes, bytes]:
    from foundry.pretrain.compressors import holdout_text, train_tail

    return train_tail(prepared, size * 3 // 4), holdout_text(prepared)[: size // 4]


def cli_bits(context: bytes, holdout: bytes, level: int) -> float:
    """Debian's zpaq: the archive of the training slice with the holdout, less the training slice's alone."""
    sizes = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (("train", context), ("both", context + holdout)):
            (Path(tmp) / f"{name}.txt").write_bytes(text)
            archive = f"{name}.zpaq"
            subprocess.run(
                ["zpaq", "a", archive, f"{name}.txt", f"-m{level}", "-t1"], cwd=tmp, check=True, capture_output=True
            )
            sizes.append((Path(tmp) / archive).stat().st_size)
    return 8 * (sizes[1] - sizes[0]) / len(holdout)


def binding_bits(context: bytes, holdout: bytes, level: int, **how) -> float:
    import zpaq

    def size(text: bytes) -> int:
        return len(zpaq.compress(text, level=level, threads=1, **how))

    return 8 * (size(context + holdout) - size(context)) / len(holdout)


def agreement(prepared: Path, size: int) -> None:
    from foundry.pretrain.compressors import zpaq_method

    context, holdout = slices(prepared, size)
    print(f"agreement on {len(context):,} training bytes then {len(holdout):,} holdout bytes (bits/byte):")
    for level in (4, 5):
        cli = cli_bits(context, holdout, level)
        named = binding_bits(context, holdout, level, method=zpaq_method(level, len(context) + len(holdout)))
        generic = binding_bits(context, holdout, level, hints=False)
        print(
            f"  -m{level}: CLI {cli:.4f}  binding, text model {named:.4f} ({named / cli - 1:+.2%})  "
            f"binding, generic model {generic:.4f} ({generic / cli - 1:+.2%})",
            flush=True,
        )


def one_set(prepared: Path, optional: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", ONE_SET, str(prepared), json.dumps(optional)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    found = json.loads(done.stdout.splitlines()[-1])
    zpaqs = {k: round(v, 4) for k, v in found["scores"].items() if k.startswith("zpaq")}
    print(
        f"  {'+'.join(optional) or 'without zpaq':12s} wall {found['wall']:6.1f} s  CPU {found['cpu']:6.1f} s  "
        f"peak {found['peak_mib']} MiB  {zpaqs}",
        flush=True,
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prepared", type=Path)
    parser.add_argument("--slice", type=int, default=1 << 20, help="bytes of the agreement check")
    parser.add_argument("--rounds", type=int, default=1, help="ABBA rounds of the cost in a run")
    args = parser.parse_args()
    if shutil.which("zpaq"):
        agreement(args.prepared, args.slice)
    else:
        print("no zpaq CLI on PATH (Debian: apt-get install zpaq): agreement not checked")
    print("compression_baselines on the whole data, each in a fresh process:")
    cpu: dict[str, list[float]] = {"": [], "zpaq4": []}
    for _ in range(args.rounds):
        for optional in ([], ["zpaq4"], ["zpaq4"], []):
            cpu["+".join(optional)].append(one_set(args.prepared, optional)["cpu"])
    both = one_set(args.prepared, ["zpaq4", "zpaq5"])["scores"]
    added = sum(cpu["zpaq4"]) / len(cpu["zpaq4"]) - sum(cpu[""]) / len(cpu[""])
    print(
        f"zpaq -m4 {both['zpaq4_bits_per_byte']:.4f}, -m5 {both['zpaq5_bits_per_byte']:.4f} bits/byte "
        f"(PPMd {both['ppmd_bits_per_byte']:.4f}); -m4 adds {added:.1f} CPU s to a run's baselines"
    )


if __name__ == "__main__":
    main()
