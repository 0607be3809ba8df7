"""The `tokenizer`, `model`, `train` and `checkpoint` sections."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, create_model, model_serializer, model_validator
from pydantic.fields import FieldInfo

from foundry.config.base import _Section

# AdamW's peak rate as the study chose it for every parameter (bench/README.md, "The study"): fine-tunes keep it.
ADAMW_LEARNING_RATE = 0.005907607550907612
# Under Muon, AdamW trains only the token table (the head's too) and the vectors: of 1.5x to 5x the study's rate, 4x
# scored best at the defaults' steps, 0.0152 bits per byte under it (bench/README.md, "The embeddings' learning rate").
MUON_SHARE_LEARNING_RATE = 0.0236


class TokenizerConfig(_Section):
    vocab_size: int = Field(4096, ge=260, le=65536, description="Byte-level BPE vocabulary, 256 bytes included.")
    min_frequency: int = Field(
        2,
        ge=1,
        description="Fewest times a pair of tokens must occur in the training text to be merged into a new token.",
    )
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
    # Depth: the best trial of the study in bench/README.md; width: that trial's 144 widened to 192 (at 1,200 steps, 0.97x
    # the time of 144 at 1,350 on a CPU with AMX: bench/README.md, "Width 192"); heads and context: 3 of 64 over 256
    # tokens (bench/README.md, "Three heads"); the rest are hand-set.
    n_layer: int = Field(2, ge=1, description="Transformer blocks (attention, then MLP) stacked in the model.")
    n_head: int = Field(
        3,
        ge=1,
        description="Attention heads per block; must divide n_embd (with rotary positions, into an even head size).",
    )
    n_embd: int = Field(
        192, ge=8, description="Width of the residual stream and embeddings; each MLP's hidden layer is 4 x this."
    )
    block_size: int = Field(
        256,
        ge=8,
        description="Context length in tokens: the length of every training window and the most the model attends "
        "to (generation keeps the last block_size tokens).",
    )
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Dropout probability on the embeddings, the attention weights and each block's residual outputs, "
        "while training only; 0 disables it.",
    )
    positions: Literal["learned", "rotary"] = Field(
        "rotary", description="learned: a table of absolute positions; rotary: queries and keys rotated (RoPE)."
    )
    bigram_buckets: int = Field(
        0,
        ge=0,
        description="Rows of a hashed bigram input table (each token's embedding plus its (previous, this) pair's "
        "row); 0 is none. Models with one export to no transformers or GGUF architecture.",
    )
    qk_norm: bool = Field(
        False,
        description="RMS-normalise each head's queries and keys (no weights) before attention. Models with it "
        "export to no transformers or GGUF architecture.",
    )
    mlp_activation: Literal["gelu", "relu2"] = Field(
        "gelu",
        description="The MLP's nonlinearity: gelu (exact) or relu2 (ReLU squared). Models with relu2 export to no "
        "transformers or GGUF architecture.",
    )
    value_embeddings: bool = Field(
        False,
        description="A token-indexed table per block whose row is added to that block's attention values "
        "(modded-nanogpt's value embeddings). Models with them export to no transformers or GGUF architecture.",
    )
    mtp_depth: int = Field(
        0,
        ge=0,
        le=4,
        description="Multi-token prediction while training: each position also predicts this many tokens past its "
        "next one, each through one more matrix and the tied head; evaluation and generation use the next-token "
        "head alone. 0 is off. Models with it export to no transformers or GGUF architecture.",
    )
    mtp_weight: float = Field(
        0.3, gt=0, le=1, description="The weight of the multi-token predictions' mean loss (model.mtp_depth > 0)."
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
    # learning_rate and max_steps: how each default was chosen, measured side by side, is in bench/README.md.
    max_steps: int = Field(
        2000,
        ge=1,
        le=10**9,
        description="Optimizer steps to train for; the learning rate's cosine decay ends at this step.",
    )
    batch_size: int = Field(
        16,
        ge=1,
        description="Rows per micro-batch on each process: windows of model.block_size tokens (alignment: packed "
        "rows for sft, preference pairs for dpo).",
    )
    grad_accum_steps: int = Field(
        1,
        ge=1,
        description="Micro-batches per optimizer step; the global batch is "
        "batch_size x grad_accum_steps x devices x num_nodes.",
    )
    batch_ramp_steps: int = Field(
        400,
        ge=0,
        description="Text pretraining from random weights: optimizer steps over which each micro-batch grows linearly "
        "from batch_ramp_rows to batch_size rows (more, smaller steps early); 0: batch_size rows throughout. Runs "
        "from init_from (fine-tuning, retraining, alignment) and image runs take batch_size rows throughout; a run of "
        "fewer steps than this never reaches batch_size.",
    )
    batch_ramp_rows: int = Field(
        4,
        ge=1,
        description="Rows of each micro-batch at the batch ramp's first step; batch_size or more: no ramp.",
    )
    learning_rate: float = Field(
        MUON_SHARE_LEARNING_RATE,
        gt=0,
        description="Peak learning rate of AdamW (with muon: of the parameters Muon leaves).",
    )
    optimizer: Literal["adamw", "muon"] = Field(
        "muon",
        description="muon: Muon for the blocks' matrices at muon_learning_rate, AdamW for the embeddings and vectors. "
        "Only from random weights: a run that starts from init_from (fine-tuning, retraining, alignment) takes AdamW, "
        "whose learning rates those recipes were measured with. learning_rate's default is muon's: adamw from random "
        "weights was measured at 0.0059.",
    )
    muon_learning_rate: float = Field(0.02, gt=0, description="Peak learning rate of Muon's matrices.")
    min_lr_ratio: float = Field(
        0.1, ge=0, le=1, description="Learning rate at the end of the cosine decay, as a fraction of the peak."
    )
    # 0.075: the last 101 of the 1,350 steps the default had then; the mean of the last 100 scored 0.018 bits per byte
    # better than the last step's, and the gain grew with the window up to there (bench/README.md, "Weights averaged
    # over the last steps").
    average_last: float = Field(
        0.075,
        ge=0,
        lt=1,
        description="Text pretraining from random weights: the saved weights are the mean of the weights after each "
        "of this share of max_steps at the end (a uniform average, as stochastic weight averaging takes it); 0: the "
        "last step's weights. Runs from init_from (fine-tuning, retraining, alignment), image models and FSDP keep "
        "the last step's.",
    )
    warmup_steps: int = Field(
        100,
        ge=0,
        description="Optimizer steps over which the learning rate rises linearly to its peak before the cosine "
        "decay; 0: no warmup.",
    )
    # Weight decay: 0.2 scored 0.0226 and 0.0183 bits per byte better than 0.1 at two seeds, 0 far worse (bench/README.md,
    # "Weight decay"); the recipes of retraining, fine-tuning and alignment keep the 0.1 they were measured at.
    weight_decay: float = Field(
        0.2,
        ge=0,
        description="Decoupled weight decay of every weight matrix, embeddings included (Muon's too); biases and "
        "norm weights are not decayed.",
    )
    grad_clip: float = Field(
        1.0,
        ge=0,
        description="Largest global L2 norm of the gradients: larger ones are scaled down to it before each "
        "optimizer step; 0 disables clipping.",
    )
    num_nodes: int = Field(
        1,
        ge=1,
        description="Machines training together, each running `devices` processes; a local launch runs all "
        "num_nodes x devices processes on this machine.",
    )
    devices: int = Field(
        1,
        ge=1,
        description="Training processes per node: one GPU each with accelerator gpu, a share of the cores on cpu "
        "(see cpu_threads).",
    )
    strategy: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="How several processes share the model: ddp, a whole copy in each with gradients averaged; "
        "fsdp, parameters, gradients and optimizer state sharded one block at a time (a CNN: whole), on GPUs "
        "or CPU ranks (gloo; to test the sharded path, no faster than ddp); needs optimizer adamw.",
    )
    accelerator: Literal["auto", "cpu", "gpu"] = Field(
        "cpu", description="What each process computes on: cpu, gpu (CUDA), or auto (gpu when CUDA is available)."
    )
    # bf16 and compile: 1.3x and 1.5x the tokens/s on a CPU with bf16 instructions, 1/16 on one without (bench/README.md).
    precision: Literal["auto", "bf16-if-native", "32-true", "bf16-mixed", "16-mixed"] = Field(
        "bf16-if-native",
        description="Lightning's numeric precision of training; auto: bf16-mixed on a GPU, 32-true on a CPU; "
        "bf16-if-native: bf16-mixed on a GPU and on a CPU with bf16 instructions (AVX512-BF16 or AMX), 32-true on "
        "any other CPU (where bf16 is emulated: 16x slower).",
    )
    compile: bool = Field(
        True,
        description="torch.compile the model (needs a C++ compiler on CPU); the first steps of each training "
        "process wait for it, about 25 s for the default model on 2 cores.",
    )
    cpu_threads: int = Field(
        0,
        ge=0,
        description="Intra-op CPU threads of each rank; 0: the cores this process may use, shared by the "
        "ranks of a node. Fixed rather than inherited; the resolved count is part of the resume key, since "
        "float sums depend on it.",
    )
    seed: int = Field(
        1337,
        description="Seed of the run (Lightning's seed_everything): the initial weights, dropout and the training "
        "windows each step draws.",
    )
    deterministic: bool | Literal["warn"] = Field(
        False,
        description="Lightning's Trainer(deterministic=...): deterministic kernels only (an op without one raises, "
        "or warns with 'warn') and cuBLAS's fixed workspace; for GPUs (on CPU a fixed thread count suffices, and a "
        "compiled model gets deterministic kernels whatever this says).",
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
        600, ge=1, description="Seconds a collective (all-reduce, barrier) may wait before it ends the process group."
    )
    retries: int = Field(
        1,
        ge=0,
        description="Prefect retries of the train task; each resumes from the last checkpoint. In one process, an "
        "error in the run's input (a ValueError or TypeError: a config, a parent of other settings) is not retried.",
    )
    max_restarts: int = Field(
        0,
        ge=0,
        description="Times the elastic agent restarts every rank after one fails (several processes only), each "
        "restart resuming from the newest intact checkpoint; Prefect retries act on top of these.",
    )
    preempt_grace_s: float = Field(60.0, gt=0, description="Seconds from SIGTERM to exit, a checkpoint written first.")
    launcher: Literal["local", "slurm"] = Field(
        "local",
        description="What starts the training processes: local, on this machine (one process, or num_nodes x "
        "devices ranks under PyTorch's elastic agent); slurm, infra/slurm/train.sbatch submitted with `sbatch "
        "--nodes=num_nodes` (devices ranks per node), waited for, then evaluated, gated and registered here. slurm "
        "needs sbatch on PATH (SLURM_CONF naming the cluster where it is not the default) and $FOUNDRY_HOME, the "
        "checkout and the data remote on storage every node sees.",
    )
    sbatch_args: str = Field(
        "",
        description="launcher slurm: more options for sbatch, as on its command line (e.g. `--partition=gpu "
        "--account=ml --time=1:00:00`); they override the script's #SBATCH lines.",
    )

    @model_validator(mode="after")
    def _fsdp_needs_adamw(self) -> TrainConfig:
        if self.strategy == "fsdp" and self.uses_muon:
            # FSDP hands the optimizer flat shards, and Muon needs each whole matrix.
            raise ValueError(
                "optimizer muon needs whole matrices; FSDP shards them: use optimizer adamw or strategy ddp (with "
                "adamw, set learning_rate: its default is muon's share's, and adamw from random weights was measured "
                "at 0.0059)"
            )
        return self

    @property
    def ramp_steps(self) -> int:
        """Steps the batch ramp makes smaller than batch_size: none from a warm start, since the ramp was measured
        from random weights only, and none when batch_ramp_rows already fills a batch."""
        return 0 if self.init_from or self.batch_ramp_rows >= self.batch_size else self.batch_ramp_steps

    @property
    def averaged_steps(self) -> int:
        """Final optimizer steps whose weights `average_last` averages: none from a warm start, whose recipes were
        measured without, none under FSDP, whose ranks each hold a shard, and at least one when asked."""
        if self.init_from or self.strategy == "fsdp" or not self.average_last:
            return 0
        return max(1, round(self.average_last * self.max_steps))

    @property
    def uses_muon(self) -> bool:
        return self.optimizer == "muon" and not self.init_from

    def resolved_precision(self, on_gpu: bool, cpu_bf16: bool) -> str:
        """`auto` and `bf16-if-native` on this device (`cpu_bf16`: the CPU has bf16 instructions); training and the
        memory planner both ask here."""
        if self.precision == "auto":
            return "bf16-mixed" if on_gpu else "32-true"
        if self.precision == "bf16-if-native":
            return "bf16-mixed" if on_gpu or cpu_bf16 else "32-true"
        return self.precision

    def deterministic_kernels(self, on_gpu: bool) -> bool | str:
        """`deterministic`, and on a CPU always for a compiled model: without, two compiled trainings differed (likely
        Inductor's atomic adds for the embedding's gradient, which fall back to eager's kernel only in this mode)."""
        return True if self.compile and not on_gpu and not self.deterministic else self.deterministic

    val_every_n_steps: int = Field(
        250,
        ge=1,
        description="Optimizer steps between validations; their loss (val/loss) is logged and, at a checkpoint's "
        "step, ranks that checkpoint for keeping as the best.",
    )
    val_batches: int = Field(
        16,
        ge=1,
        description="Batches each validation scores, of batch_size windows from the start of the holdout (alignment: "
        "of its held-out split).",
    )
    init_from: str = Field("", description="A model.pt to start from instead of random weights (fine-tuning).")


class CheckpointConfig(_Section):
    every_n_steps: int = Field(
        250, ge=1, description="Optimizer steps between checkpoints; one is also written when training ends."
    )
    keep_last: int = Field(2, ge=1, description="Checkpoints kept: the last keep_last plus the best by val/loss.")
    async_save: bool = Field(
        False, description="Write checkpoints off the training thread, which stalls only for a copy."
    )


class _TrainOverride(_Section):
    """Keys of `train` that a variant sets otherwise; a key left unset (null) keeps `train`'s value."""

    @model_serializer(mode="wrap")
    def _set_keys_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Unset keys are left out; a key whose default is set stays even when null, so the YAML round-trips.
        fields = type(self).model_fields
        return {k: v for k, v in handler(self).items() if v is not None or fields[k].default is not None}

    def applied_to(self, train: TrainConfig) -> TrainConfig:
        """`train` with the keys set here in place of its own, validated as one `train` section."""
        return TrainConfig.model_validate({**train.model_dump(), **self.model_dump(exclude_none=True)})


def train_override(name: str, module: str, doc: str, **defaults: Any) -> type[_TrainOverride]:
    """A variant's `train` override: every key of `train` but init_from (the variant's start, set by its flow),
    optional, with `train`'s type, bounds and description, so each key is defined once, in TrainConfig;
    unset unless `defaults` sets it (the variant's recipe)."""
    unknown = set(defaults) - set(TrainConfig.model_fields)
    if unknown:
        raise TypeError(f"not keys of train: {sorted(unknown)}")
    fields = {
        key: _optional(field, defaults.get(key))
        for key, field in TrainConfig.model_fields.items()
        if key != "init_from"
    }
    return create_model(name, __base__=_TrainOverride, __module__=module, __doc__=doc, **fields)


def _optional(field: FieldInfo, default: Any) -> tuple[Any, Any]:
    optional = field.annotation | None
    annotation = Annotated[optional, *field.metadata] if field.metadata else optional
    return annotation, Field(default, description=field.description)
