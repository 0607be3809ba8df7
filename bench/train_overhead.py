"""Our training step (Lightning, MLflow logging on) against a raw PyTorch loop, same model and data.

    python bench/train_overhead.py [--steps 150] [--block 1] [--warmup 10] [--set train.batch_size=16 ...]

Both train the default config's GPT with the optimizer training builds for it (params.yaml; bench/README.md says which
model each recorded figure is of) on the same `RandomWindows` over synthetic tokens (`train.batch_size` rows a step
throughout: no batch ramp), in this one process, with the same optimizer, schedule and clipping. Both in eager float32
unless `--set train.precision=... --set train.compile=true` say otherwise: the raw loop then autocasts to bf16 where
the precision resolves to bf16-mixed on this machine and compiles its model as the trainer does (in place). Ours is
`foundry.training.trainer`'s Trainer: the windowed metrics (loss, lr, tokens/s, step time, data wait) go to a real
MLflow run every `train.log_every_n_steps`; checkpoints and validation are off (bench/checkpoint.py measures those).
The two alternate step by step inside one Lightning run (a callback runs the raw step), so load from other work on the
machine hits both alike. The last line is the headline: total time of ours / total time of raw over the same number of
steps, MLflow logging included (target <= 1.05x).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if "FOUNDRY_HOME" not in os.environ:  # a throwaway home (MLflow store, checkpoints), removed at exit
    os.environ["FOUNDRY_HOME"] = tempfile.mkdtemp(prefix="foundry-bench-")
    atexit.register(shutil.rmtree, os.environ["FOUNDRY_HOME"], True)

from foundry.runtime.env import configure_environment  # noqa: E402

configure_environment()  # before the libraries load


def synthetic_tokens(vocab_size: int, n: int = 4_000_000, seed: int = 0):
    import numpy as np

    return np.random.default_rng(seed).integers(0, vocab_size, n, dtype=np.uint16)


def loader(config, tokens):
    from models.data import RandomWindows, RankDraw

    t, m = config.train, config.model
    return RandomWindows(tokens, m.block_size, t.batch_size, RankDraw(t.seed, steps_per_epoch=10**6))


class RawLoop:
    """nanoGPT-style: the same model, optimizer, schedule, clipping and batches, no framework."""

    def __init__(self, config, tokens):
        import torch

        from foundry.runtime.arithmetic import compiles, resolve_precision
        from models.gpt import GPT, GPTConfig
        from models.lit_base import warmup_cosine
        from models.optim import muon_adamw

        t = self.train = config.train
        torch.manual_seed(t.seed)
        self.model = GPT(GPTConfig(vocab_size=config.tokenizer.vocab_size, **config.model.model_dump()))
        self.bf16 = resolve_precision(t) == "bf16-mixed"  # Lightning's bf16-mixed on a CPU: autocast to bf16
        if compiles(t):
            self.model.compile()  # as the trainer compiles its model
        if t.uses_muon:  # the optimizer training builds for this config
            self.optimizer = muon_adamw(self.model, t.learning_rate, t.muon_learning_rate, t.weight_decay)
        else:
            self.optimizer = torch.optim.AdamW(
                self.model.optimizer_groups(t.weight_decay), lr=t.learning_rate, betas=(0.9, 0.95), fused=True
            )
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: warmup_cosine(s, t.warmup_steps, t.max_steps, t.min_lr_ratio)
        )
        self.batches, self.step = iter(loader(config, tokens)), 0

    def run(self, steps: int) -> float:
        """Train `steps` steps; seconds per step."""
        import torch

        start = time.perf_counter()
        for _ in range(steps):
            x, y = next(self.batches)
            self.optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
                _, loss = self.model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.train.grad_clip)
            self.optimizer.step()
            self.schedule.step()
            self.step += 1
            if self.step % self.train.log_every_n_steps == 0:
                loss.item()  # what printing the loss costs
        return (time.perf_counter() - start) / steps


def interleaver(raw: RawLoop, warmup: int, block: int):
    """A callback that, after every `block` of our steps, runs `block` raw steps: both see the same load.
    Ours is timed from the end of the previous raw block to the end of our block."""
    from lightning.pytorch import Callback

    class Interleave(Callback):
        ours: list[float] = []
        raw_times: list[float] = []
        mark: float | None = None

        def on_train_batch_end(self, trainer, *args) -> None:
            step = trainer.global_step
            if step < warmup or (step - warmup) % block:
                return
            if self.mark is not None:
                self.ours.append((time.perf_counter() - self.mark) / block)
            self.raw_times.append(raw.run(block))
            self.mark = time.perf_counter()

    return Interleave()


def run(config, tokens, warmup: int, block: int, run_id: str | None, folder: Path):
    """`foundry.training.trainer`'s Trainer and LightningModule logging to MLflow, interleaved with the raw loop."""
    from foundry.checkpointing.writer import ManifestCheckpointIO
    from foundry.core.workload import named
    from foundry.pretrain.training import vocabulary_only
    from foundry.training.trainer import Progress, _trainer, build_module
    from models.data import SequentialWindows

    text = named("text")
    module = build_module(config, text, vocabulary_only(config.tokenizer.vocab_size))
    io = ManifestCheckpointIO(folder, config.checkpoint.keep_last, config.checkpoint.async_save)
    trainer = _trainer(config, run_id, io, Progress(bar=False), text.fsdp_units(module))
    raw = RawLoop(config, tokens)
    raw.run(warmup)
    timer = interleaver(raw, warmup, block)
    trainer.callbacks.append(timer)
    val = SequentialWindows(tokens[:100_000], config.model.block_size, config.train.batch_size, max_batches=1)
    trainer.fit(module, loader(config, tokens), val)
    return timer.ours, timer.raw_times[: len(timer.ours)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="timed steps of each")
    parser.add_argument("--block", type=int, default=1, help="steps of one before switching to the other")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    import torch

    from foundry.config import load_config
    from foundry.runtime import tracking
    from foundry.runtime.arithmetic import compiles, resolve_precision

    steps = args.warmup + args.steps
    overrides = [
        f"train.max_steps={steps}",
        f"train.val_every_n_steps={10 * steps}",
        f"checkpoint.every_n_steps={10 * steps}",
        "train.precision=32-true",  # the raw loop's: eager float32
        "train.compile=false",
        *args.overrides,
    ]
    config = load_config(None, overrides)
    tokens = synthetic_tokens(config.tokenizer.vocab_size)
    print(
        f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, torch threads {torch.get_num_threads()}; "
        f"{args.steps} timed steps each, alternating every {args.block}; {config.train.batch_size} x "
        f"{config.model.block_size} tokens a step; MLflow log every {config.train.log_every_n_steps} steps; "
        f"precision {resolve_precision(config.train)}, {'compiled' if compiles(config.train) else 'eager'}"
    )
    run_id = tracking.start_pipeline_run(config, run_name="bench train_overhead")
    with tempfile.TemporaryDirectory() as folder:
        ours, raw = run(config, tokens, args.warmup, args.block, run_id, Path(folder))
    tracking.end_run(run_id, True)
    tokens_per_step = config.train.batch_size * config.model.block_size
    ratios = sorted(o / r for o, r in zip(ours, raw))
    print(
        f"raw {1000 * statistics.mean(raw):.1f} ms/step ({tokens_per_step / statistics.mean(raw):,.0f} tokens/s), "
        f"ours {1000 * statistics.mean(ours):.1f} ms/step ({tokens_per_step / statistics.mean(ours):,.0f} tokens/s)"
    )
    print(
        f"paired ratios: median {statistics.median(ratios):.3f}x, quartiles {ratios[len(ratios) // 4]:.3f}x"
        f"-{ratios[3 * len(ratios) // 4]:.3f}x; load now {os.getloadavg()[0]:.2f}"
    )
    print(f"train_overhead: {sum(ours) / sum(raw):.2f}x")


if __name__ == "__main__":
    main()
