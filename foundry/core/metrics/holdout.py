"""A model's scores on a dataset's holdout, as one typed value, and the one place that names their MLflow keys.

Training logs them as `holdout/<field>` metrics on its run; versions registered before metrics stayed on the
run carry the same keys as tags. `as_mlflow()` writes those keys, `from_mlflow()` reads them back from either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

PREFIX = "holdout/"


def window_stride(block_size: int, overlap: float) -> int:
    """Tokens between the starts of two scoring windows that repeat `overlap` of the window as context (here, not
    in `metrics`, so that a model card names the context without importing torch)."""
    return max(1, block_size - round(block_size * overlap))


class HoldoutMetrics(BaseModel):
    """Loss, perplexity and bits per byte on the holdout, beside the baselines a model should beat.

    Only `bits_per_byte` is always there: a merge scores nothing else, the gate re-scores without the
    compression baselines, and old versions recorded what their code computed then."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    loss: float | None = None  # nats per token
    perplexity: float | None = None
    bits_per_byte: float  # summed loss over the holdout's UTF-8 bytes: what promotion compares
    tokens: int | None = None  # holdout tokens scored (`evaluation.max_tokens` caps them)
    unigram_bits_per_byte: float | None = None  # train-split token frequencies, add-one smoothed
    gzip_bits_per_byte: float | None = None  # gzip -9 on the holdout after the tail of the train text
    xz_bits_per_byte: float | None = None  # xz -6, the same way
    # The strongest general compressors, given `baseline_train_bytes` of the train text's tail (versions from
    # before 2026-12 have none of these three).
    xz9e_bits_per_byte: float | None = None  # xz -9e (preset 9 | PRESET_EXTREME)
    ppmd_bits_per_byte: float | None = None  # PPMd order 16, variant I (pyppmd)
    baseline_train_bytes: int | None = None  # training text xz -9e and PPMd saw: `evaluation.strong_context_bytes`

    BASELINES: ClassVar[tuple[str, ...]] = ("unigram", "gzip", "xz", "xz9e", "ppmd")
    # How cards and summaries name each baseline.
    LABELS: ClassVar[dict[str, str]] = {
        "unigram": "unigram",
        "gzip": "gzip",
        "xz": "xz",
        "xz9e": "xz -9e",
        "ppmd": "PPMd order 16",
    }
    COUNTS: ClassVar[tuple[str, ...]] = ("tokens", "baseline_train_bytes")  # integers, stored as floats
    # What a reproduction must match: the model's own figures, not the baselines (they depend on the data only).
    COMPARED: ClassVar[tuple[str, ...]] = ("loss", "bits_per_byte", "perplexity")

    @staticmethod
    def key(field: str) -> str:
        """The MLflow metric (or legacy tag) name of a field: `holdout/<field>`."""
        if field not in HoldoutMetrics.model_fields:
            raise KeyError(f"HoldoutMetrics has no field {field!r}; it has {', '.join(HoldoutMetrics.model_fields)}")
        return PREFIX + field

    def as_mlflow(self) -> dict[str, float]:
        """The fields that were measured, under their MLflow keys, in the order they are declared (the order
        evaluation has always logged them in)."""
        return {self.key(name): float(value) for name, value in self if value is not None}

    @classmethod
    def from_mlflow(cls, metrics: Mapping[str, float | str]) -> HoldoutMetrics:
        """From a run's metrics or a version's tags (values may be strings); other keys are ignored."""
        values = {name: metrics[cls.key(name)] for name in cls.model_fields if cls.key(name) in metrics}
        if "bits_per_byte" not in values:
            raise KeyError(f"no {cls.key('bits_per_byte')} among the recorded metrics ({', '.join(sorted(metrics))})")
        # MLflow stores every metric as a float, tags as strings
        return cls.model_validate({k: int(float(v)) if k in cls.COUNTS else float(v) for k, v in values.items()})

    @classmethod
    def recorded_in(cls, metrics: Mapping[str, float | str]) -> bool:
        """Whether these metrics or tags hold holdout scores at all."""
        return cls.key("bits_per_byte") in metrics

    def with_scores(self, scores: Mapping[str, float]) -> HoldoutMetrics:
        """These metrics and more of them (`compression_bits_per_byte`'s, by field name), validated."""
        return HoldoutMetrics.model_validate({**self.model_dump(exclude_none=True), **scores})

    def baselines(self) -> dict[str, float]:
        """The baselines that were measured, by name (unigram, gzip, xz, xz9e, ppmd)."""
        scores = {name: getattr(self, f"{name}_bits_per_byte") for name in self.BASELINES}
        return {name: value for name, value in scores.items() if value is not None}

    def strongest_baseline(self) -> tuple[str, float] | None:
        """The measured baseline with the fewest bits per byte, by name; None when none was measured."""
        scores = self.baselines()
        return min(scores.items(), key=lambda item: item[1]) if scores else None

    def compared(self) -> dict[str, float]:
        """The figures a reproduction checks, under their MLflow keys, for those that were measured."""
        return {self.key(name): float(getattr(self, name)) for name in self.COMPARED if getattr(self, name) is not None}

    def baseline_label(self, name: str, strongest: bool = False) -> str:
        """A baseline's name on a card: the compressor, the training text the strong ones saw, and whether it is
        the strongest."""
        label = self.LABELS[name]
        if name in ("xz9e", "ppmd") and self.baseline_train_bytes is not None:
            label += f", given {self.baseline_train_bytes / 2**20:.1f} MiB of training text"
        return label + (" (strongest baseline)" if strongest else "")

    def strongest_baseline_line(self) -> str:
        """The strongest baseline measured and the model against it, in a sentence; empty when none was measured."""
        strongest = self.strongest_baseline()
        if strongest is None:
            return ""
        name, value = strongest
        gap = self.bits_per_byte - value
        side = "behind" if gap > 0 else "ahead of"
        return (
            f"{self.baseline_label(name)}, {value:.4f} bits/byte; this model is "
            f"{abs(gap):.4f} bits/byte ({abs(gap) / value:.1%}) {side} it."
        )

    def summary_rows(self) -> list[tuple[str, str]]:
        """What `foundry run`'s summary prints of them, (label, line) a row: the holdout, the baselines and the
        strongest of them, where one was measured."""
        baselines = "  ".join(f"{self.LABELS[name]} {value:.4f}" for name, value in self.baselines().items())
        rows = [
            ("holdout", f"loss {self.loss:.4f}  perplexity {self.perplexity:.2f}  bits/byte {self.bits_per_byte:.4f}"),
            ("baselines", f"{baselines} bits/byte"),
        ]
        return rows + ([("strongest", self.strongest_baseline_line())] if self.strongest_baseline() else [])
