"""The one typed config (this module and the section modules it imports): flow parameters, DVC params.yaml and
MLflow params come from its defaults; `foundry config --defaults --write params.yaml` writes them, a test compares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from foundry.config_align import AlignConfig

PII_KINDS = Literal["private_key", "aws_access_key", "aws_secret_key", "email", "credit_card", "ipv6", "ipv4", "phone"]


class _Section(BaseModel):
    # Unknown keys are typos, not extensions: reject them so a misspelt override never goes unnoticed.
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataConfig(_Section):
    source: str = Field(
        "stdlib://",
        description="Local directory or glob, http(s) URL, s3://bucket/prefix, or stdlib:// "
        "(stdlib://PART for one package) for the running interpreter's standard library sources; "
        "may be empty when `sources` lists them.",
    )
    sources: list[str] = Field(
        [],
        description="More sources, read after `source`, each in any form `source` takes; a source that "
        "cannot be reached is skipped (counted) or stops the run, by on_error.",
    )
    extensions: list[str] = Field(
        [".txt", ".md", ".py", ".jsonl", ".parquet"],
        description="File types read from directories; each also when gzip-compressed (NAME.EXT.gz). "
        ".jsonl and .parquet hold one document per record, other types one per file.",
    )
    exclude_dirs: list[str] = Field(
        ["site-packages", "test", "tests", "idle_test", "__pycache__"],
        description="Directory names skipped while walking a local source.",
    )
    jsonl_text_field: str = "text"
    parquet_text_column: str = "text"
    remote: str = Field("", description="DVC remote URL; empty means $FOUNDRY_HOME/dvc-remote.")
    holdout_fraction: float = Field(0.05, gt=0, lt=0.5)
    min_chars: int = Field(200, ge=1, description="Documents shorter than this are dropped.")
    max_chars: int = Field(400_000, ge=1, description="Documents longer than this are dropped.")
    max_line_chars: int = Field(2_000, ge=1, description="Documents with a longer line are dropped.")
    min_alpha_fraction: float = Field(0.25, ge=0, le=1, description="Minimum share of letters.")
    min_mean_word_length: float = Field(
        3.0, ge=0, description="Gopher: mean length of whitespace-separated words, lower bound."
    )
    max_mean_word_length: float = Field(15.0, gt=0, description="Gopher: mean word length, upper bound.")
    max_symbol_word_ratio: float = Field(0.5, ge=0, description="Gopher: (# and ellipses) per word, upper bound.")
    max_repeated_line_fraction: float = Field(
        0.5, ge=0, le=1, description="Share of non-blank lines repeating an earlier one."
    )
    max_non_printable_fraction: float = Field(
        0.01, ge=0, le=1, description="Share of control, zero-width or private-use characters."
    )
    near_dup_threshold: float = Field(
        0.8,
        ge=0.05,
        le=1,
        description="Estimated Jaccard similarity (MinHash LSH) of word shingles at which a "
        "document counts as a near duplicate of an earlier kept one and is dropped; at most 0.95, or 1 to keep "
        "near duplicates.",
    )
    near_dup_shingle_words: int = Field(5, ge=1, description="Words per shingle for near-duplicate detection.")
    near_dup_num_perm: int = Field(128, ge=64, le=1024, description="MinHash permutations.")
    pii: list[Literal[PII_KINDS]] = Field(  # type: ignore[valid-type]
        list(PII_KINDS.__args__),
        description="PII detectors whose matches are replaced by typed placeholders "
        "such as <EMAIL>; the validation gate checks that none is left.",
    )
    holdout_tolerance: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="The gate accepts a holdout share of tokens down to "
        "holdout_fraction * (1 - this); the split itself guarantees the fraction in bytes.",
    )
    on_error: Literal["skip", "fail"] = "skip"
    shard_tokens: int = Field(16_777_216, ge=1024, description="Tokens per shard file.")
    workers: int = Field(
        1,
        ge=1,
        description="Dask worker processes (one core each) for the partition steps of prepare. "
        "1 runs them in the calling process: on the default corpus a local cluster costs more than it saves.",
    )
    scheduler: str = Field(
        "",
        pattern=r"^(|local|(tcp|tls|ws|wss|inproc|ucx)://\S+)$",
        description="'' (a local Dask cluster when workers > 1), 'local' (one even for 1 worker) or the "
        "address of an existing Dask scheduler, e.g. tcp://10.0.0.5:8786, whose workers see the same files.",
    )
    partition_bytes: int = Field(
        64 << 20,
        ge=1 << 16,
        description="Most source bytes per partition; there are at least as many partitions as workers.",
    )

    @model_validator(mode="after")
    def _bounds(self) -> DataConfig:
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) must not exceed max_chars ({self.max_chars})")
        if self.min_mean_word_length > self.max_mean_word_length:
            raise ValueError(
                f"min_mean_word_length ({self.min_mean_word_length}) must not exceed "
                f"max_mean_word_length ({self.max_mean_word_length})"
            )
        if 0.95 < self.near_dup_threshold < 1:  # LSH bands cannot be cut that fine from these signatures
            raise ValueError(
                f"near_dup_threshold ({self.near_dup_threshold}) must be at most 0.95, or 1 to keep near duplicates"
            )
        listed = self.source_list
        if not listed:
            raise ValueError("no source: set data.source or data.sources")
        if len(set(listed)) != len(listed):
            raise ValueError(f"a source is listed twice in {listed}")
        if any(not ext.startswith(".") for ext in self.extensions):
            raise ValueError(f"extensions must start with a dot, e.g. '.txt': {self.extensions}")
        return self

    @property
    def source_list(self) -> list[str]:
        """Every source in reading order: `source` (when set), then `sources`."""
        return ([self.source] if self.source else []) + list(self.sources)


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
    n_layer: int = Field(3, ge=1)
    n_head: int = Field(6, ge=1)
    n_embd: int = Field(192, ge=8)
    block_size: int = Field(128, ge=8, description="Context length in tokens.")
    dropout: float = Field(0.0, ge=0, lt=1)

    @model_validator(mode="after")
    def _heads_divide_width(self) -> ModelConfig:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        return self


class TrainConfig(_Section):
    max_steps: int = Field(700, ge=1)
    batch_size: int = Field(32, ge=1, description="Sequences per micro-batch on each device.")
    grad_accum_steps: int = Field(
        1,
        ge=1,
        description="Micro-batches per optimizer step; the global batch is "
        "batch_size x grad_accum_steps x devices x num_nodes.",
    )
    learning_rate: float = Field(3e-3, gt=0)
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
        "ranks of a node. Fixed rather than inherited, so that a resumed run sums floats as the first one did.",
    )
    seed: int = 1337
    log_every_n_steps: int = Field(
        25, ge=1, description="Metrics (loss, lr, tokens/s, step time, data wait, MFU) every N steps."
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
        return self

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


class EvaluationConfig(_Section):
    max_tokens: int = Field(2_000_000, ge=1, description="Cap on holdout tokens scored.")
    batch_size: int = Field(32, ge=1)
    min_improvement: float = Field(0.0, ge=0, description="Bits per byte a challenger must gain to be champion.")
    max_regression: float = Field(
        0.02,
        ge=0,
        description="Forgetting guard: bits per byte a challenger may lose against the champion on the "
        "champion's own holdout and still be promoted.",
    )
    compression_context_bytes: int = Field(
        8 << 20, ge=0, description="Training text (its tail) that gzip and xz see before the holdout."
    )
    prompts: list[str] = Field(
        ["def ", "import ", "class Parser:\n    def __init__(self", "# Copyright", "    return "],
        description="Prompts whose generations are logged with every evaluation.",
    )
    max_new_tokens: int = Field(64, ge=1)
    generation_seed: int = 0


class RetrainConfig(_Section):
    cron: str = Field("0 3 * * 1", description="Schedule of the retrain deployment (Mondays 03:00 by default).")
    max_steps: int = Field(200, ge=1, description="Fine-tuning steps from the champion.")
    learning_rate: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(20, ge=0)


class RegistryConfig(_Section):
    model_name: str = Field("foundry-gpt", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    experiment: str = "foundry"
    auto_promote: bool = True


class FoundryConfig(_Section):
    data: DataConfig = DataConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    registry: RegistryConfig = RegistryConfig()
    retrain: RetrainConfig = RetrainConfig()
    align: AlignConfig = AlignConfig()

    def flat(self) -> dict[str, Any]:
        """Dotted keys to scalar values, the form MLflow params take."""
        flat: dict[str, Any] = {}
        for section, values in self.model_dump().items():
            for key, value in values.items():
                flat[f"{section}.{key}"] = json.dumps(value) if isinstance(value, list) else value
        return flat


class ConfigError(ValueError):
    """A config that does not validate; the message names key, value and what is allowed."""


def _describe(error: dict[str, Any], raw: dict[str, Any]) -> str:
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        section = error["loc"][0] if len(error["loc"]) > 1 else None
        model = (
            FoundryConfig.model_fields[section].annotation if section in FoundryConfig.model_fields else FoundryConfig
        )
        allowed = ", ".join(model.model_fields)  # type: ignore[union-attr]
        return f"{key}: unknown key; allowed here: {allowed}"
    value = error.get("input")
    return f"{key} = {value!r}: {error['msg']}"


def validate(raw: dict[str, Any]) -> FoundryConfig:
    try:
        return FoundryConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(_describe(e, raw) for e in exc.errors())
        raise ConfigError(f"invalid config: {problems}") from None


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply one `dotted.key=value`; the value is parsed as YAML so numbers and lists keep their type."""
    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r} is not of the form section.key=value")
    dotted, text = assignment.split("=", 1)
    parts = dotted.strip().split(".")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"override key {dotted!r} must be section.key, e.g. train.max_steps")
    section, key = parts
    raw.setdefault(section, {})
    if not isinstance(raw[section], dict):
        raise ConfigError(f"{section} is a section, not a value")
    raw[section][key] = yaml.safe_load(text) if text.strip() else ""


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> FoundryConfig:
    """Defaults, then the YAML file (if any), then `--set` overrides; validated once at the end."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of sections, not {type(loaded).__name__}")
        raw = loaded
    for assignment in overrides:
        apply_override(raw, assignment)
    return validate(raw)


def to_yaml(config: FoundryConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
