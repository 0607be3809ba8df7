"""GPT-2-small tokens/s and MFU in bf16 on one GPU: our Lightning step against a raw PyTorch loop.

    python bench/gpu_mfu.py [--batch 32] [--steps 40] [--warmup 15] [--no-compile] [--peak-flops 989e12]
    python bench/gpu_mfu.py --smoke     # the same code paths on CPU with a tiny model (no figures)

GPT-2 small: 12 layers, 12 heads, width 768, context 1024, vocabulary 50304 (124M parameters),
synthetic tokens, AdamW (fused), bf16 autocast, torch.compile. Both loops draw the same
`RandomWindows` batches. MFU is nanoGPT's estimate: (6N + 12 L H Q T) FLOPs per token x tokens/s,
over the device's dense bf16 peak (looked up by name: H100/H200 989 TFLOP/s, A100 312). Also
prints the peak memory allocated next to `foundry plan`'s estimate for the same config.
Without a CUDA device it says so and exits with status 1. The last line is the headline
(target: MFU >= 40% on one H200).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
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

from foundry.config.training import ADAMW_LEARNING_RATE  # noqa: E402

GPT2_SMALL = [
    "model.n_layer=12",
    "model.n_head=12",
    "model.n_embd=768",
    "model.block_size=1024",
    "tokenizer.vocab_size=50304",
    "model.dropout=0.0",
    # The architecture and optimizer of the recorded figures (bench/README.md), the raw loop's fused AdamW too, at
    # AdamW's own rate (the default is Muon's share's).
    "model.positions=learned",
    "train.optimizer=adamw",
    f"train.learning_rate={ADAMW_LEARNING_RATE}",
]
SMOKE = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32", "tokenizer.vocab_size=512"]
SMOKE += GPT2_SMALL[-3:]


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def raw_loop(config, tokens, warmup: int, device: str) -> float:
    """Seconds per step of a plain loop: the same model, optimizer, precision and batches."""
    import torch

    from models.data import RandomWindows, RankDraw
    from models.gpt import GPT, GPTConfig

    t, m = config.train, config.model
    torch.manual_seed(t.seed)
    model = GPT(GPTConfig(vocab_size=config.tokenizer.vocab_size, **m.model_dump())).to(device)
    optimizer = torch.optim.AdamW(
        model.optimizer_groups(t.weight_decay), lr=t.learning_rate, betas=(0.9, 0.95), fused=True
    )
    step_model = torch.compile(model) if t.compile else model
    batches = iter(RandomWindows(tokens, m.block_size, t.batch_size, RankDraw(t.seed, steps_per_epoch=10**6)))
    bf16 = device == "cuda"
    for step in range(1, t.max_steps + 1):
        x, y = (b.to(device, non_blocking=True) for b in next(batches))
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            _, loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        optimizer.step()
        if step == warmup:
            synchronize()
            start = time.perf_counter()
    synchronize()
    return (time.perf_counter() - start) / (t.max_steps - warmup)


def ours(config, tokens, warmup: int) -> float:
    """Seconds per step of `foundry.training.trainer`'s Trainer and LightningModule."""
    from lightning.pytorch import Callback

    from foundry.checkpointing.writer import ManifestCheckpointIO
    from foundry.core.workload import named
    from foundry.pretrain.training import vocabulary_only
    from foundry.training.trainer import Progress, _trainer, build_module
    from models.data import RandomWindows, RankDraw

    t, m = config.train, config.model

    class StepTimer(Callback):
        def on_train_batch_end(self, trainer, *args) -> None:
            if trainer.global_step in (warmup, t.max_steps):
                synchronize()
                setattr(self, "start" if trainer.global_step == warmup else "end", time.perf_counter())

    timer = StepTimer()
    with tempfile.TemporaryDirectory() as folder:
        text = named("text")
        module = build_module(config, text, vocabulary_only(config.tokenizer.vocab_size))
        io = ManifestCheckpointIO(Path(folder), 1)
        trainer = _trainer(config, None, io, Progress(bar=False), text.fsdp_units(module))
        trainer.callbacks.append(timer)
        loader = RandomWindows(tokens, m.block_size, t.batch_size, RankDraw(t.seed, steps_per_epoch=10**6))
        trainer.fit(module, loader)
    return (timer.end - timer.start) / (t.max_steps - warmup)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="sequences of 1024 tokens per step")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=15, help="untimed steps (compilation happens here)")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--peak-flops", type=float, default=0.0, help="override the device's bf16 peak FLOP/s")
    parser.add_argument("--smoke", action="store_true", help="tiny model on CPU: checks the code, measures nothing")
    args = parser.parse_args()

    import numpy as np
    import torch

    from foundry.config import load_config
    from foundry.training.plan import estimate
    from foundry.training.trainer import lookup_peak_flops
    from models.gpt import GPT, GPTConfig

    if not args.smoke and not torch.cuda.is_available():
        print("gpu_mfu: no CUDA device on this machine; nothing measured (run it where a GPU is, or --smoke)")
        return 1
    device = "cpu" if args.smoke else "cuda"
    shape = SMOKE if args.smoke else GPT2_SMALL
    config = load_config(
        None,
        [
            *shape,
            f"train.batch_size={args.batch}",
            f"train.max_steps={args.steps}",
            f"train.accelerator={'cpu' if args.smoke else 'gpu'}",
            f"train.compile={not args.no_compile and not args.smoke}",
            "train.precision=auto",  # bf16-mixed on the GPU; the smoke's CPU run checks the code in float32
            "train.val_every_n_steps=1000000",
            "checkpoint.every_n_steps=1000000",
            "train.log_every_n_steps=10",
        ],
    )
    name = "CPU (smoke)" if args.smoke else torch.cuda.get_device_name()
    peak = args.peak_flops or (1e11 if args.smoke else lookup_peak_flops(name, "bf16-mixed"))
    if not peak:
        print(f"gpu_mfu: no known bf16 peak for {name!r}; pass --peak-flops")
        return 1
    tokens = np.random.default_rng(0).integers(0, config.tokenizer.vocab_size, 20_000_000, dtype=np.uint16)
    flops_per_token = GPT(
        GPTConfig(vocab_size=config.tokenizer.vocab_size, **config.model.model_dump())
    ).flops_per_token()
    tokens_per_step = config.train.batch_size * config.model.block_size
    print(
        f"{name}; peak {peak / 1e12:.0f} TFLOP/s; {flops_per_token / 1e6:.0f} MFLOP/token; "
        f"{config.train.batch_size} x {config.model.block_size} tokens a step; compile {config.train.compile}"
    )
    results = {}
    for label, run in (
        ("raw", lambda: raw_loop(config, tokens, args.warmup, device)),
        ("ours", lambda: ours(config, tokens, args.warmup)),
    ):
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        seconds = run()
        rate = tokens_per_step / seconds
        results[label] = rate * flops_per_token / peak
        memory = torch.cuda.max_memory_allocated() if device == "cuda" else 0
        print(
            f"{label}: {1000 * seconds:.1f} ms/step, {rate:,.0f} tokens/s, MFU {results[label]:.1%}"
            + (f", peak allocated {memory / 2**30:.1f} GiB" if memory else ""),
            flush=True,
        )
    planned = estimate(config, on_gpu=device == "cuda").peak
    print(f"foundry plan's estimate for this config: {planned / 2**30:.1f} GiB (without torch.compile's savings)")
    what = "tiny model, fp32: code check only" if args.smoke else "bf16, GPT-2 small"
    print(f"gpu_mfu: {results['ours']:.1%} MFU ours, {results['raw']:.1%} raw ({name}, {what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
