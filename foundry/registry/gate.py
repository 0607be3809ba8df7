"""Stage E, the promotion gate: the whole policy that decides whether a challenger becomes champion.

The challenger is compared with the current champion on the challenger's own holdout. When the
champion was evaluated on that same data version its recorded score is used; otherwise it is
re-scored on this holdout, so both are measured on the same bytes.
"""

from __future__ import annotations

import logging
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.contracts import DataVersion, GateDecision
from foundry.registry import versions
from foundry.registry.lineage import recorded_metrics

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
    if champion.tags.get("data_version") == data.data_version:
        recorded = recorded_metrics(champion).get("holdout/bits_per_byte")
        if recorded is not None:
            return recorded
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
