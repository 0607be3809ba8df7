"""Stage E, the promotion gate: the whole policy that decides whether a challenger becomes champion.

The challenger is compared with the current champion on the challenger's own holdout. When the
champion was evaluated on that same data version its recorded score is used; otherwise it is
re-scored on this holdout, so both are measured on the same bytes.
"""

from __future__ import annotations

import logging
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.contracts import AlignmentDecision, DataVersion, GateDecision
from foundry.registry import versions

log = logging.getLogger(__name__)


def gate(challenger_bpb: float, champion_bpb: float | None, min_improvement: float) -> tuple[bool, str]:
    """Promote when there is no champion, or when the challenger is better by at least `min_improvement`."""
    if champion_bpb is None:
        return True, "no champion yet"
    if challenger_bpb <= champion_bpb - min_improvement and challenger_bpb < champion_bpb:
        return True, f"{challenger_bpb:.4f} beats champion's {champion_bpb:.4f} bits/byte"
    return False, f"{challenger_bpb:.4f} does not beat champion's {champion_bpb:.4f} bits/byte by {min_improvement}"


def champion_bits_per_byte(champion, config: FoundryConfig, data_dir: Path, data: DataVersion, home: Path) -> float:
    """The champion's score on this holdout: its recorded one if it was evaluated on it, else re-scored."""
    if champion.tags.get("data_version") == data.data_version and "holdout/bits_per_byte" in champion.tags:
        return float(champion.tags["holdout/bits_per_byte"])
    from foundry.evaluation.metrics import holdout_metrics
    from models.gpt import load_gpt

    artifacts = versions.download(champion, home)
    e = config.evaluation
    metrics = holdout_metrics(
        load_gpt(artifacts / "model.pt"), artifacts / "tokenizer.json", data_dir, e.batch_size, e.max_tokens
    )
    score = metrics["holdout/bits_per_byte"]
    log.info("champion v%s re-scored on data %s: %.4f bits/byte", champion.version, data.data_version, score)
    return score


def decide(
    config: FoundryConfig, metrics: dict[str, float], data_dir: Path, data: DataVersion, home: Path
) -> GateDecision:
    """The gate's inputs and verdict for a challenger with these holdout `metrics`, and whether it becomes
    champion now: only when it passed and `registry.auto_promote` is on (else a reviewer decides)."""
    current = versions.champion(config.registry.model_name)
    champion_bpb = None if current is None else champion_bits_per_byte(current, config, data_dir, data, home)
    challenger_bpb = metrics["holdout/bits_per_byte"]
    passed, verdict = gate(challenger_bpb, champion_bpb, config.evaluation.min_improvement)
    return GateDecision(
        passed=passed,
        make_champion=passed and config.registry.auto_promote,
        verdict=verdict,
        challenger_bits_per_byte=challenger_bpb,
        champion_bits_per_byte=champion_bpb,
        champion_version=None if current is None else str(current.version),
        min_improvement=config.evaluation.min_improvement,
    )


# --- alignment: the aligned model against the base it started from ---------------------------------


def alignment_checks(method: str, metrics: dict[str, float], max_regression: float) -> dict[str, bool]:
    """Each comparison with the base, on the same held-out alignment data and on the base's pretraining holdout:
    sft lowers the held-out response loss; dpo raises the held-out preference accuracy (or keeps it at 1) and
    widens the margin; either loses at most `max_regression` bits per byte of pretraining holdout. A metric
    that is missing fails its check: a comparison that could not be made passes nothing."""

    def better(key: str, lower: bool) -> bool:
        a, b = metrics.get(f"align/{key}"), metrics.get(f"base/{key}")
        return a is not None and b is not None and (a < b if lower else a > b)

    checks = {}
    if method == "sft":
        checks["response_loss"] = better("response_loss", lower=True)
    else:
        a, b = metrics.get("align/preference_accuracy"), metrics.get("base/preference_accuracy")
        checks["preference_accuracy"] = a is not None and b is not None and (a > b or a == b == 1.0)
        checks["preference_margin"] = better("preference_margin", lower=False)
    a, b = metrics.get("align/pretrain_bits_per_byte"), metrics.get("base/pretrain_bits_per_byte")
    checks["pretrain_regression"] = a is not None and b is not None and a <= b + max_regression
    return checks


def _verdict(method: str, metrics: dict[str, float], checks: dict[str, bool], max_regression: float) -> str:
    def compared(name: str) -> str:
        key = "pretrain_bits_per_byte" if name == "pretrain_regression" else name
        a, b = (metrics.get(f"{who}/{key}") for who in ("align", "base"))
        text = f"{key} {'?' if a is None else f'{a:.4f}'} vs base {'?' if b is None else f'{b:.4f}'}"
        return text + (f" (may lose {max_regression})" if name == "pretrain_regression" else "")

    outcome = "passed" if all(checks.values()) else "failed"
    parts = [f"{'ok' if ok else 'FAILED'} {compared(name)}" for name, ok in checks.items()]
    return f"{method} {outcome} the alignment gate: " + "; ".join(parts)


def decide_alignment(config: FoundryConfig, metrics: dict[str, float]) -> AlignmentDecision:
    """The alignment gate's checks and verdict; champion of `align.model_name` only when every check passed
    and `registry.auto_promote` is on."""
    e = config.evaluation
    checks = alignment_checks(config.align.method, metrics, e.max_regression)
    passed = all(checks.values())
    return AlignmentDecision(
        passed=passed,
        make_champion=passed and config.registry.auto_promote,
        verdict=_verdict(config.align.method, metrics, checks, e.max_regression),
        method=config.align.method,
        checks=checks,
        max_regression=e.max_regression,
    )
