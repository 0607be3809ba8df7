"""Muon's orthogonalization of the default model's matrices: ours (float32 on CPU) against torch.optim.Muon's.

    python bench/muon_step.py [--repeats 20] [--set model.n_embd=192 ...]

`torch.optim.Muon` runs its Newton-Schulz iteration in bfloat16; `models.optim.orthogonalize` runs the same
iteration in float32 on a CPU. Both orthogonalize every matrix Muon steps in the config's model (four per block),
on this process's threads as training sets them, alternating call by call. The last line is the headline: the
time of ours per optimizer step against torch's, and the largest difference between the two results (bfloat16's
rounding).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    import torch
    from torch.optim._muon import _zeropower_via_newtonschulz

    from foundry.config import load_config
    from foundry.runtime.arithmetic import cpu_threads
    from models.gpt import GPT, GPTConfig
    from models.optim import NS_COEFFICIENTS, muon_groups, orthogonalize

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    config = load_config(Path("params.yaml"), args.overrides)
    torch.set_num_threads(cpu_threads(config.train))
    model = GPT(GPTConfig(vocab_size=config.tokenizer.vocab_size, **config.model.model_dump()))
    stepped = next(g for g in muon_groups(model, 0.0, 1.0) if g.get("muon"))
    matrices = [torch.randn_like(p) for p in stepped["params"]]
    shapes = sorted({tuple(m.shape) for m in matrices})
    print(f"{len(matrices)} matrices {shapes}, {torch.get_num_threads()} threads")

    def ours():
        return [orthogonalize(m) for m in matrices]

    def torchs():
        return [_zeropower_via_newtonschulz(m, NS_COEFFICIENTS, 5, 1e-7) for m in matrices]

    times: dict[str, list[float]] = {"ours": [], "torch": []}
    for _ in range(3):  # warm-up
        ours(), torchs()
    for _ in range(args.repeats):
        for name, run in (("ours", ours), ("torch", torchs)):
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    gap = max((a - b.float()).abs().max().item() for a, b in zip(ours(), torchs()))
    ms = {name: 1000 * statistics.median(t) for name, t in times.items()}
    print(f"muon_step: float32 {ms['ours']:.1f} ms, bfloat16 (torch) {ms['torch']:.1f} ms per optimizer step")
    print(f"muon_step: {ms['ours'] / ms['torch']:.3f}x torch's time (median of {args.repeats}); largest gap {gap:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
