"""`foundry plan`: memory per device for a config, and the largest micro-batch that fits.

Counted from the model's shapes, not measured, so it runs in milliseconds without torch:

    parameters   4 B each (fp32 master weights, also under bf16-mixed)
    gradients    4 B each
    optimizer    8 B each (AdamW's two moments); 4 B for the blocks' matrices under Muon (one momentum)
    DDP buckets  4 B each when several processes all-reduce gradients
    activations  what autograd saves for the backward pass, per micro-batch (see `_saved_bytes`)

With `finetune.method: lora` the frozen weights have no gradients, optimizer state or buckets: those count
the adapters only (`adapter_params`), whose own activations (a rank-wide vector per projection) are left out.
FSDP shards parameters, gradients and optimizer state across all processes, but keeps the root
module (embeddings) and about two blocks unsharded while they compute.
The peak is the larger of the two moments that matter: the start of the backward pass (all
activations saved, the loss's gradients just created) and the optimizer step (all gradients).
On CPU with fp32 the estimate is checked against the profiler's allocation timeline
(tests/fast/training/test_plan.py); the bf16 and FSDP figures follow the same counts but are not measured here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from foundry.config import FoundryConfig, ModelConfig
from foundry.runtime.cpu_features import cpu_has_bf16

# Saved for backward, per block, in elements of a (micro_batch, block_size, n_embd) tensor:
# ln_1 input, ln_1 output, q, k, v, attention output (its merged heads share it), ln_2 input,
# ln_2 output, fc output (4), gelu output (4). Under bf16/16-mixed the two layer-norm inputs
# (the residual stream) stay fp32 and the rest is stored in 16 bits.
BLOCK_BYTES = {"32-true": 16 * 4, "mixed": 2 * 4 + 14 * 2}
# With dropout the CPU's attention falls back to the math kernel, which keeps (B, heads, T, T)
# probabilities, mask and dropped probabilities (~13 B per element, measured); GPUs' fused kernels do not.
ATTENTION_DROPOUT_BYTES = 13
# Rotary positions add three fp32 tensors of that shape per block (the rotated queries and keys attention saves
# instead of views of the projection, and one intermediate), 12 B per element measured on CPU in fp32.
ROTARY_BYTES = 12
# Muon's step holds about 3.5 copies of the matrix it orthogonalizes (its update, two iterates, the Gram matrices),
# measured against the profiler on the two optimizer-bound configs of tests/fast/training/test_plan.py.
MUON_STEP_COPIES = 3.5
UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_bytes(text: str) -> int:
    """'80GB', '80 GiB', '512MB', '1e9' -> bytes."""
    match = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).upper() not in UNITS:
        raise ValueError(f"{text!r} is not a size such as 80GB, 80GiB or 512MB")
    return int(float(match.group(1)) * UNITS[match.group(2).upper()])


def block_params(m: ModelConfig) -> int:
    c = m.n_embd
    return 2 * 2 * c + (3 * c * c + 3 * c) + (c * c + c) + (4 * c * c + 4 * c) + (4 * c * c + c)


def root_params(m: ModelConfig, vocab_size: int) -> int:
    """Embeddings (the head is tied to them), value embeddings, bigram rows, learned positions (rotary ones have no
    table), the multi-token predictions' matrices and the final layer norm."""
    positions = m.block_size * m.n_embd if m.positions == "learned" else 0
    tables = 1 + (m.n_layer if m.value_embeddings else 0)
    ahead = m.mtp_depth * m.n_embd * m.n_embd
    return (tables * vocab_size + m.bigram_buckets) * m.n_embd + positions + ahead + 2 * m.n_embd


def n_params(m: ModelConfig, vocab_size: int) -> int:
    return root_params(m, vocab_size) + m.n_layer * block_params(m)


def adapter_params(config: FoundryConfig) -> int:
    """Parameters LoRA trains: rank x (in + out) for every targeted projection of every block; 0 for full."""
    f, c = config.finetune, config.model.n_embd
    if f.method != "lora":
        return 0
    shapes = {"attn.qkv": c + 3 * c, "attn.proj": c + c, "mlp.fc": c + 4 * c, "mlp.proj": 4 * c + c}
    chosen = [k for k in shapes if any(k == t or k.endswith(f".{t}") for t in f.lora_targets)]
    return config.model.n_layer * f.lora_rank * sum(shapes[k] for k in chosen)


def _precision(config: FoundryConfig, on_gpu: bool) -> str:
    """A CPU plan is for this machine's CPU: `bf16-if-native` resolves by its instructions."""
    return config.train.resolved_precision(on_gpu, cpu_has_bf16())


def _saved_bytes(config: FoundryConfig, vocab_size: int, micro_batch: int, on_gpu: bool) -> int:
    """Activations autograd keeps from the forward pass to the backward pass of one micro-batch."""
    m = config.model
    btc, btv = micro_batch * m.block_size * m.n_embd, micro_batch * m.block_size * vocab_size
    per_block = btc * BLOCK_BYTES["32-true" if _precision(config, on_gpu) == "32-true" else "mixed"]
    if m.dropout > 0:
        per_block += 2 * btc  # residual dropout masks, one byte per element
        if not on_gpu:
            per_block += ATTENTION_DROPOUT_BYTES * micro_batch * m.n_head * m.block_size**2
    if m.positions == "rotary":
        per_block += ROTARY_BYTES * btc
    head = 2 * btc * 4 + btv * 4  # final layer norm in and out; log-softmax output (fp32 under autocast too)
    head += m.mtp_depth * (btc * 4 + btv * 4)  # per depth: its matrix's output, and its own log-softmax
    return m.n_layer * per_block + head + (btc if m.dropout > 0 else 0)


@dataclass(frozen=True)
class MemoryPlan:
    params: int
    parameters: int
    gradients: int
    optimizer: int
    buckets: int
    activations: int
    peak: int
    micro_batch: int


def estimate(config: FoundryConfig, micro_batch: int | None = None, on_gpu: bool | None = None) -> MemoryPlan:
    """Bytes per device for `micro_batch` sequences (default: train.batch_size)."""
    t, m = config.train, config.model
    vocab, b = config.tokenizer.vocab_size, micro_batch or t.batch_size
    on_gpu = t.accelerator != "cpu" if on_gpu is None else on_gpu
    n, world = n_params(m, vocab), t.devices * t.num_nodes
    largest = max(vocab * m.n_embd, m.bigram_buckets * m.n_embd, 4 * m.n_embd * m.n_embd)
    if t.strategy == "fsdp":
        unsharded = root_params(m, vocab) + 2 * block_params(m)
        weights, grads, moments, buckets = 4 * (n // world + unsharded), 4 * (n // world + unsharded), 8 * n // world, 0
    else:
        muon_stepped = m.n_layer * 12 * m.n_embd * m.n_embd if t.uses_muon else 0  # FSDP refuses Muon
        weights, grads, moments = 4 * n, 4 * n, 8 * n - 4 * muon_stepped
        buckets = 4 * n if world > 1 else 0
    if adapters := adapter_params(config):  # frozen weights: gradients and moments for the adapters only
        trained = adapters // world if t.strategy == "fsdp" else adapters
        n += adapters
        weights, grads, moments = weights + 4 * trained, 4 * trained, 8 * trained
        buckets = 4 * adapters if world > 1 and t.strategy != "fsdp" else 0
    casts = 2 * n if _precision(config, on_gpu) != "32-true" else 0  # 16-bit weight copies autocast keeps for backward
    activations = _saved_bytes(config, vocab, b, on_gpu)
    loss_grads = 2 * 4 * b * m.block_size * vocab  # d(loss)/d(log-probs) and d(loss)/d(logits)
    backward_start = weights + moments + buckets + casts + activations + loss_grads
    # The optimizer step's temporaries, in fp32 copies of the largest parameter: one for the fused AdamW that
    # training uses (measured on CPU), two for the foreach one it falls back to under 16-mixed.
    temporaries = (2 if _precision(config, on_gpu) == "16-mixed" else 1) * 4 * largest
    if t.uses_muon:  # AdamW's part steps one tensor at a time, Muon's largest matrix is 4 n_embd x n_embd
        temporaries = max(4 * largest, int(MUON_STEP_COPIES * 4 * 4 * m.n_embd * m.n_embd))
    optimizer_step = weights + moments + buckets + grads + temporaries
    return MemoryPlan(n, weights, grads, moments, buckets, activations, max(backward_start, optimizer_step), b)


def largest_micro_batch(
    config: FoundryConfig, device_memory: int, usable: float = 0.9, on_gpu: bool | None = None
) -> int:
    """The most sequences per device whose peak fits `usable` of the memory; 0 if not even one."""
    budget = device_memory * usable
    if estimate(config, 1, on_gpu).peak > budget:
        return 0
    low, high = 1, 2
    while estimate(config, high, on_gpu).peak <= budget:
        low, high = high, high * 2
    while high - low > 1:  # the peak grows with the micro-batch: bisect
        mid = (low + high) // 2
        low, high = (mid, high) if estimate(config, mid, on_gpu).peak <= budget else (low, mid)
    return low


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n < 2**30 else f"{n / 2**30:,.2f} GiB"


def format_plan(config: FoundryConfig, device_memory: int | None = None, usable: float = 0.9) -> str:
    t, m = config.train, config.model
    p = estimate(config)
    world = t.devices * t.num_nodes
    on_gpu = t.accelerator != "cpu"
    lines = [
        f"model        {p.params:,} parameters ({m.n_layer} layers, width {m.n_embd}, context {m.block_size}, "
        f"vocab {config.tokenizer.vocab_size}); {_precision(config, on_gpu)} on {'GPU' if on_gpu else 'CPU'}, "
        f"{t.strategy} over {world} device(s)",
        f"per device   parameters {_mib(p.parameters)}, gradients {_mib(p.gradients)}, optimizer {_mib(p.optimizer)}"
        + (f", DDP buckets {_mib(p.buckets)}" if p.buckets else ""),
        f"activations  {_mib(p.activations)} for a micro-batch of {p.micro_batch} x {m.block_size} tokens",
        f"peak         {_mib(p.peak)} per device (allocations; add the runtime's own memory)",
    ]
    if device_memory:
        fits = largest_micro_batch(config, device_memory, usable)
        lines.append(
            f"fits         micro-batch {fits} in {_mib(device_memory)} ({usable:.0%} of it usable)"
            if fits
            else f"fits         nothing: even one sequence needs more than {usable:.0%} of {_mib(device_memory)}"
        )
    return "\n".join(lines)
