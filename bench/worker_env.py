"""A training step in a process with the variables Dask's nanny sets before it starts a worker, against one without.

    python bench/worker_env.py [--steps 30] [--warmup 10] [--set model.n_layer=2 ...]

Dask's nanny writes `distributed.nanny.pre-spawn-environ` (MALLOC_TRIM_THRESHOLD_, OMP_NUM_THREADS=1, ...)
into a worker's environment before it starts. A search trial trains in such a worker. This times the same
optimizer steps of the config's model (`params.yaml`'s unless `--set`) on random tokens in a fresh process
with those variables and in one without, in the order A B B A; training sets its own thread count in both.
The last line is the headline: the step-time ratio (with / without).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys, time, torch
from foundry.config import load_config
from foundry.runtime.arithmetic import cpu_threads
from models.gpt import GPT, GPTConfig
args = json.loads(sys.argv[1])
config = load_config(args["config"], args["sets"])
torch.manual_seed(0)
torch.set_num_threads(cpu_threads(config.train))
m, t = config.model, config.train
model = GPT(GPTConfig(vocab_size=config.tokenizer.vocab_size, block_size=m.block_size, n_layer=m.n_layer,
                      n_head=m.n_head, n_embd=m.n_embd, dropout=m.dropout))
optimizer = torch.optim.AdamW(model.parameters(), lr=t.learning_rate)
x, y = (torch.randint(0, config.tokenizer.vocab_size, (t.batch_size, m.block_size)) for _ in range(2))
for step in range(args["warmup"] + args["steps"]):
    if step == args["warmup"]:
        start = time.perf_counter()
    _, loss = model(x, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print((time.perf_counter() - start) / args["steps"])
"""


def pre_spawn_variables() -> dict[str, str]:
    import dask
    import distributed  # noqa: F401  (loads the distributed section of dask's config)

    return {k: str(v) for k, v in dask.config.get("distributed.nanny.pre-spawn-environ").items() if v is not None}


def step_seconds(variables: dict[str, str], args: argparse.Namespace) -> float:
    env = {k: v for k, v in os.environ.items() if k not in pre_spawn_variables()}
    env.update(variables)
    payload = json.dumps({"config": str(REPO / "params.yaml"), "sets": args.overrides, **vars(args)})
    done = subprocess.run(
        [sys.executable, "-c", CHILD, payload], env=env, cwd=REPO, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    variables = pre_spawn_variables()
    print("Dask's pre-spawn variables:", " ".join(f"{k}={v}" for k, v in sorted(variables.items())))
    times: dict[bool, list[float]] = {True: [], False: []}
    for with_dask in (False, True, True, False):
        times[with_dask].append(step_seconds(variables if with_dask else {}, args))
        print(f"{'with' if with_dask else 'without':7s} {times[with_dask][-1] * 1000:7.1f} ms per step", flush=True)
    with_dask, without = statistics.mean(times[True]), statistics.mean(times[False])
    print(f"worker_env: {with_dask / without:.2f}x step time ({with_dask * 1000:.0f} vs {without * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
