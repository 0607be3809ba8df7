"""A model's scores on a dataset's holdout, as one typed value, and the one place that names their MLflow keys.

Training logs them as `holdout/<field>` metrics on its run; versions registered before metrics stayed on the
run carry the same keys as tags. `as_mlflow()` writes those keys, `from_mlflow()` reads them back from either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from foundry.core.metrics.baselines import PREFIX, BaselinedMetrics

__all__ = ["PREFIX", "HoldoutMetrics", "absent_line", "window_stride"]


def window_stride(block_size: int, overlap: float) -> int:
    """Tokens between the starts of two scoring windows that repeat `overlap` of the window as context (here, not
    in `metrics`, so that a model card names the context without importing torch)."""
    return max(1, block_size - round(block_size * overlap))


ZPAQ_PIN = "zpaq==0.3.7"  # pyproject.toml's: what an absent zpaq baseline asks to install


def absent_line(names: Sequence[str]) -> str:
    """Baselines asked for but not scored (the optional ones are zpaq's), and why, in a sentence; empty for none."""
    if not names:
        return ""
    labels = " and ".join(HoldoutMetrics.LABELS[name] for name in names)
    return f"{labels} not scored: the `zpaq` package is not installed or does not load (pip install {ZPAQ_PIN})."


class HoldoutMetrics(BaselinedMetrics):
    """Loss, perplexity and bits per byte on the holdout, beside the baselines a model should beat.

    Only `bits_per_byte` is always there: a merge scores nothing else, the gate re-scores without the
    compression baselines, and old versions recorded what their code computed then."""

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
    # zpaq 7.15's context mixing, when `evaluation.baselines` asks for it (versions from before #58 have none).
    zpaq4_bits_per_byte: float | None = None  # zpaq -m4, one thread
    zpaq5_bits_per_byte: float | None = None  # zpaq -m5, one thread
    baseline_train_bytes: int | None = None  # training text the strong ones saw: `evaluation.strong_context_bytes`
    # Asked for but not scored (the `zpaq` package missing): named in the summary and card, never read as a score;
    # not logged to MLflow (what was measured is).
    absent_baselines: tuple[str, ...] = ()

    kind: ClassVar[str] = "holdout"
    BASELINES: ClassVar[tuple[str, ...]] = ("unigram", "gzip", "xz", "xz9e", "ppmd", "zpaq4", "zpaq5")
    STRONG: ClassVar[tuple[str, ...]] = ("xz9e", "ppmd", "zpaq4", "zpaq5")  # given `baseline_train_bytes`
    # How cards and summaries name each baseline.
    LABELS: ClassVar[dict[str, str]] = {
        "unigram": "unigram",
        "gzip": "gzip",
        "xz": "xz",
        "xz9e": "xz -9e",
        "ppmd": "PPMd order 16",
        "zpaq4": "zpaq -m4",
        "zpaq5": "zpaq -m5",
    }
    NOT_SCALAR: ClassVar[frozenset[str]] = frozenset({"absent_baselines"})
    COUNTS: ClassVar[tuple[str, ...]] = ("tokens", "baseline_train_bytes")  # integers, stored as floats
    # What a reproduction must match: the model's own figures, not the baselines (they depend on the data only).
    COMPARED: ClassVar[tuple[str, ...]] = ("loss", "bits_per_byte", "perplexity")
    GATE_FIGURE: ClassVar[str] = "bits_per_byte"
    BASELINE_SUFFIX: ClassVar[str] = "_bits_per_byte"
    HIGHER_IS_BETTER: ClassVar[bool] = False  # fewer bits per byte is better

    def with_scores(self, scores: Mapping[str, float], absent: Sequence[str] = ()) -> HoldoutMetrics:
        """These metrics and more of them (`compression_baselines`', by field name), validated; `absent` the
        baselines asked for that could not be scored (`compressors.absent_baselines`)."""
        found = {**self.model_dump(exclude_none=True), **scores}
        return HoldoutMetrics.model_validate(found | ({"absent_baselines": tuple(absent)} if absent else {}))

    def baseline_label(self, name: str, strongest: bool = False) -> str:
        """A baseline's name on a card: the compressor, the training text the strong ones saw, and whether it is
        the strongest."""
        label = self.LABELS[name]
        if name in self.STRONG and self.baseline_train_bytes is not None:
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

    def absent_line(self) -> str:
        """The baselines asked for but not scored, and why, in a sentence; empty when none is absent."""
        return absent_line(self.absent_baselines)

    def summary_rows(self) -> list[tuple[str, str]]:
        """What `foundry run`'s summary prints of them, (label, line) a row: the holdout, the baselines, the
        strongest of them where one was measured, and those asked for but absent."""
        baselines = "  ".join(f"{self.LABELS[name]} {value:.4f}" for name, value in self.baselines().items())
        rows = [
            ("holdout", f"loss {self.loss:.4f}  perplexity {self.perplexity:.2f}  bits/byte {self.bits_per_byte:.4f}"),
            ("baselines", f"{baselines} bits/byte"),
        ]
        rows += [("strongest", self.strongest_baseline_line())] if self.strongest_baseline() else []
        return rows + ([("absent", self.absent_line())] if self.absent_baselines else [])
