"""The `tokenizer`, `model`, `train` and `checkpoint` sections."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from foundry.config.base import _Section


class TokenizerConfig(_Section):
    vocab_size: int = Field(4096, ge=260, le=65536, description="Byte-level BPE vocabulary, 256 bytes included.")
    min_frequency: int = Field(2, ge=1)
    max_train_bytes: int = Field(
        32 << 20,
        ge=1 << 16,
        description="Train on a uniform sample (by content hash) of about this many bytes of the "
        "train split when it is larger: the trainer's memory grows with the vocabulary of what it reads.",
    )
    from_file: str = Field(
        "", description="Reuse this tokenizer.json instead of training one (fine-tuning keeps its parent's)."
    )


class ModelConfig(_Section):
    # Depth and width: the best trial of the study in bench/README.md; the rest are hand-set.
    n_layer: int = Field(2, ge=1)
    n_head: int = Field(6, ge=1)
    n_embd: int = Field(144, ge=8)
    block_size: int = Field(128, ge=8, description="Context length in tokens.")
    dropout: float = Field(0.0, ge=0, lt=1)
    positions: Literal["learned", "rotary"] = Field(
        "rotary", description="learned: a table of absolute positions; rotary: queries and keys rotated (RoPE)."
    )

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if self.positions == "rotary" and (self.n_embd // self.n_head) % 2:
            raise ValueError(
                f"positions rotary needs an even head size; n_embd / n_head is {self.n_embd // self.n_head}"
            )
        return self


class TrainConfig(_Section):
    # Learning rate: that trial's (AdamW's share, under Muon); max_steps: fitted with rotary positions and Muon to
    # under the earlier defaults' training time (bench/README.md).
    max_steps: int = Field(860, ge=1)
    batch_size: int = Field(32, ge=1, description="Sequences per micro-batch on each device.")
    grad_accum_steps: int = Field(
        1,
        ge=1,
        description="Micro-batches per optimizer step; the global batch is "
        "batch_size x grad_accum_steps x devices x num_nodes.",
    )
    learning_rate: float = Field(
        0.005907607550907612,
        gt=0,
        description="Peak learning rate of AdamW (with muon: of the parameters Muon leaves).",
    )
    optimizer: Literal["adamw", "muon"] = Field(
        "muon",
        description="muon: Muon for the blocks' matrices at muon_learning_rate, AdamW for the embeddings and vectors. "
        "Only from random weights: a run that starts from init_from (fine-tuning, retraining, alignment) takes AdamW, "
        "whose learning rates those recipes were measured with.",
    )
    muon_learning_rate: float = Field(0.02, gt=0, description="Peak learning rate of Muon's matrices.")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="Cosine floor as a fraction of learning_rate.")
    warmup_steps: int = Field(100, ge=0)
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, ge=0, description="0 disables clipping.")
    num_nodes: int = Field(1, ge=1)
    devices: int = Field(1, ge=1)
    strategy: Literal["ddp", "fsdp"] = Field("ddp", description="How several processes share the model.")
    accelerator: Literal["auto", "cpu", "gpu"] = "cpu"
    precision: Literal["auto", "32-true", "bf16-mixed", "16-mixed"] = Field(
        "auto", description="auto: bf16-mixed on a GPU, 32-true on a CPU."
    )
    compile: bool = Field(False, description="torch.compile the model (needs a C++ compiler on CPU).")
    cpu_threads: int = Field(
        0,
        ge=0,
        description="Intra-op CPU threads of each rank; 0: the cores this process may use, shared by the "
        "ranks of a node. Fixed rather than inherited; the resolved count is part of the resume key, since "
        "float sums depend on it.",
    )
    seed: int = 1337
    deterministic: bool | Literal["warn"] = Field(
        False,
        description="Lightning's Trainer(deterministic=...): deterministic kernels only (an op without one raises, "
        "or warns with 'warn') and cuBLAS's fixed workspace; for GPUs (on CPU a fixed thread count suffices).",
    )
    log_every_n_steps: int = Field(
        25, ge=1, description="Metrics (loss, lr, tokens/s, step time, data wait, MFU) every N steps."
    )
    progress_every_s: float = Field(
        30.0,
        gt=0,
        description="Seconds between progress reports (Prefect artifact and log line: step, loss, tokens/s).",
    )
    peak_flops: float = Field(
        0.0, ge=0, description="Peak FLOP/s of one device, for MFU; 0 looks it up for known GPUs (A100, H100, H200)."
    )
    collective_timeout_s: int = Field(
        600, ge=1, description="A collective waiting longer than this ends the process group."
    )
    retries: int = Field(
        1, ge=0, description="Prefect retries of the train task; each resumes from the last checkpoint."
    )
    max_restarts: int = Field(
        0,
        ge=0,
        description="Times the elastic agent restarts every rank after one fails (several processes only), each "
        "restart resuming from the newest intact checkpoint; Prefect retries act on top of these.",
    )

    @model_validator(mode="after")
    def _fsdp_needs_a_gpu(self) -> TrainConfig:
        if self.strategy == "fsdp" and self.accelerator == "cpu":
            raise ValueError(
                "strategy fsdp needs accelerator gpu (Lightning's FSDP does not run on CPU); use strategy ddp on CPU"
            )
        if self.strategy == "fsdp" and self.uses_muon:
            # FSDP hands the optimizer flat shards, and Muon needs each whole matrix.
            raise ValueError(
                "optimizer muon needs whole matrices; FSDP shards them: use optimizer adamw or strategy ddp"
            )
        return self

    @property
    def uses_muon(self) -> bool:
        return self.optimizer == "muon" and not self.init_from

    def resolved_precision(self, on_gpu: bool) -> str:
        """`auto`: bf16-mixed on a GPU, 32-true on a CPU. Training and the memory planner both ask here."""
        if self.precision != "auto":
            return self.precision
        return "bf16-mixed" if on_gpu else "32-true"

    val_every_n_steps: int = Field(250, ge=1)
    val_batches: int = Field(16, ge=1)
    init_from: str = Field("", description="A model.pt to start from instead of random weights (fine-tuning).")


class CheckpointConfig(_Section):
    every_n_steps: int = Field(250, ge=1)
    keep_last: int = Field(2, ge=1, description="Checkpoints kept: the last keep_last plus the best by val/loss.")
    async_save: bool = Field(
        False, description="Write checkpoints off the training thread, which stalls only for a copy."
    )
