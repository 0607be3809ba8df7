"""A training step of the default model in float32 against bf16 autocast, eager and compiled, on this CPU.

    python bench/cpu_precision.py [--steps 10] [--set model.n_embd=256 ...]

One forward, backward and AdamW step of `train.batch_size` windows of random tokens, as `params.yaml` shapes the
model, on `train.cpu_threads` threads; each mode in a fresh process, a few steps to warm up (the compile), then the
median of `--steps` timed steps. The last line is the headline: bf16's step time against float32's, eager and
compiled, and what `train.precision` (default bf16-if-native) resolves to on this CPU. Whether bf16 pays depends on
the CPU's instructions: with AVX512-BF16 or AMX it computes bf16; without them it is emulated.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODES = ("float32", "bf16", "float32-compiled", "bf16-compiled")
WARMUP_STEPS = 3


def time_steps(mode: str, steps: int, overrides: list[str]) -> dict:
    """In this process: the median seconds of a step in `mode`, after the warm-up."""
    import torch

    from foundry.config import load_config
    from foundry.runtime.arithmetic import cpu_threads
    from models.gpt import GPT, GPTConfig

    config = load_config(ROOT / "params.yaml", overrides)
    torch.set_num_threads(cpu_threads(config.train))
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=config.tokenizer.vocab_size, **config.model.model_dump()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model) if mode.endswith("-compiled") else model
    shape = (config.train.batch_size, config.model.block_size)
    tokens = torch.randint(0, config.tokenizer.vocab_size, shape)
    targets = torch.randint(0, config.tokenizer.vocab_size, shape)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode.startswith("bf16")):
            _, loss = forward(tokens, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    start = time.perf_counter()
    for _ in range(WARMUP_STEPS):
        step()
    warmup = time.perf_counter() - start
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {"step_s": statistics.median(times), "warmup_s": warmup, "threads": torch.get_num_threads()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(time_steps(args.child, args.steps, args.overrides)))
        return 0
    from foundry.config import load_config
    from foundry.runtime.arithmetic import resolve_precision
    from foundry.runtime.cpu_features import cpu_has_bf16
    from foundry.training.cpu_peak import cpu_model

    sets = [f"--set={o}" for o in args.overrides]
    results = {}
    for mode in MODES:
        command = [sys.executable, __file__, "--child", mode, "--steps", str(args.steps), *sets]
        results[mode] = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        r = results[mode]
        print(f"{mode}: {1000 * r['step_s']:.0f} ms a step ({r['threads']} threads), warm-up {r['warmup_s']:.1f} s")
    eager = results["bf16"]["step_s"] / results["float32"]["step_s"]
    compiled = results["bf16-compiled"]["step_s"] / results["float32-compiled"]["step_s"]
    train = load_config(ROOT / "params.yaml", args.overrides).train
    print(f"cpu: {cpu_model()}; bf16 instructions: {cpu_has_bf16()}")
    resolved = f"{train.precision}: {resolve_precision(train)}"
    print(f"cpu_precision: bf16 step {eager:.2f}x float32's eager, {compiled:.2f}x compiled; {resolved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
