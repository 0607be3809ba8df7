"""Stage E, the promotion gate: the whole policy that decides whether a challenger becomes champion.

0. Versions a dead run left half-published are withdrawn first (`versions.recover`), so the champion is one
   whose publication completed (the caller holds the model's promotion lock).
1. Same footing: the champion's data version must be the one this run's data was built on (its ledger), or
   this very data; otherwise the champion's training documents may sit in this holdout, and the run is
   refused (run it again: it builds on the new champion's ledger).
2. Better on the new holdout: the challenger is compared with the champion on the challenger's own holdout.
   When the champion was evaluated on that same data version its recorded score is used; otherwise it is
   re-scored on this holdout, so both are measured on the same bytes.
3. No forgetting: both are scored on the champion's own holdout (its data version, hydrated on this node);
   a challenger worse there by more than `evaluation.max_regression` bits per byte is refused.

An aligned model is judged against the base it started from instead (`decide_alignment`), on the same
held-out alignment data and, within the same `evaluation.max_regression`, on the base's pretraining holdout.
"""

from __future__ import annotations

import logging
from pathlib import Path

from foundry.config import FoundryConfig
from foundry.contracts import AlignmentDecision, DataVersion, GateDecision, OldHoldout
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


def score(weights: Path, tokenizer: Path, data_dir: Path, config: FoundryConfig) -> float:
    """Bits per byte of a model on the holdout of `data_dir`, tokenized with its own tokenizer."""
    from foundry.evaluation.metrics import holdout_metrics
    from models.gpt import load_gpt

    e = config.evaluation
    return holdout_metrics(load_gpt(weights), tokenizer, data_dir, e.batch_size, e.max_tokens)["holdout/bits_per_byte"]


def champion_bits_per_byte(champion, config: FoundryConfig, data_dir: Path, data: DataVersion, home: Path) -> float:
    """The champion's score on this holdout: its recorded one if it was evaluated on it, else re-scored."""
    if champion.tags.get("data_version") == data.data_version:
        recorded = recorded_metrics(champion).get("holdout/bits_per_byte")  # its run's, or tags of older versions
        if recorded is not None:
            return recorded
    artifacts = versions.download(champion, home)
    bpb = score(artifacts / "model.pt", artifacts / "tokenizer.json", data_dir, config)
    log.info("champion v%s re-scored on data %s: %.4f bits/byte", champion.version, data.data_version, bpb)
    return bpb


def champion_data(champion) -> DataVersion:
    """The data version a registered version was trained and evaluated on, from its lineage tags."""
    try:
        return DataVersion(data_version=champion.tags["data_version"], remote=champion.tags["data.remote"])
    except KeyError as missing:
        raise ValueError(
            f"champion models:/{champion.name}/{champion.version} records no {missing} tag: its holdout cannot "
            "be found, so nothing can be compared with it; promote a version the pipeline registered"
        ) from None


def old_holdout(
    champion,
    challenger: Path,
    metrics: dict[str, float],
    champion_bpb: float,
    config: FoundryConfig,
    data_dir: Path,
    data: DataVersion,
    home: Path,
) -> OldHoldout:
    """Challenger and champion on the champion's own holdout (its data version, hydrated once per node)."""
    from foundry.data.hydrate import hydrate_version

    old = champion_data(champion)
    limit = config.evaluation.max_regression
    if old.data_version == data.data_version:  # the same holdout: its scores are the ones above
        return OldHoldout(
            data_version=old.data_version,
            challenger_bits_per_byte=metrics["holdout/bits_per_byte"],
            champion_bits_per_byte=champion_bpb,
            max_regression=limit,
        )
    old_dir = hydrate_version(old, home)
    artifacts = versions.download(champion, home)
    return OldHoldout(
        data_version=old.data_version,
        challenger_bits_per_byte=score(challenger, data_dir / "tokenizer.json", old_dir, config),
        champion_bits_per_byte=score(artifacts / "model.pt", artifacts / "tokenizer.json", old_dir, config),
        max_regression=limit,
    )


def _footing(champion, built_on: str | None, data: DataVersion) -> str:
    """Why the champion cannot be compared with this run ('' when it can)."""
    trained_on = champion_data(champion).data_version
    if trained_on in (built_on, data.data_version):
        return ""
    return (
        f"champion v{champion.version} (data {trained_on[:12]}) is not the version this run's data was built on "
        f"({built_on[:12] if built_on else 'none'}): its training documents may be in this holdout; run again"
    )


def decide(
    config: FoundryConfig,
    challenger: Path,
    metrics: dict[str, float],
    data_dir: Path,
    data: DataVersion,
    home: Path,
    built_on: str | None = None,
) -> GateDecision:
    """The gate's inputs and verdict for the challenger `challenger` (its model.pt) with these holdout `metrics`,
    on data built on the ledger of data version `built_on` (None: built afresh), and whether it becomes
    champion now: only when it passed and `registry.auto_promote` is on (else a reviewer decides)."""
    e = config.evaluation
    if withdrawn := versions.recover(config.registry.model_name):  # left half-published by a dead run
        log.warning("withdrew versions %s of %s, left half-published", withdrawn, config.registry.model_name)
    current = versions.champion(config.registry.model_name)  # fails closed: an error is not "no champion"
    challenger_bpb = metrics["holdout/bits_per_byte"]
    if current is None:
        passed, verdict = gate(challenger_bpb, None, e.min_improvement)
        return GateDecision(
            passed=passed,
            make_champion=passed and config.registry.auto_promote,
            verdict=verdict,
            challenger_bits_per_byte=challenger_bpb,
            min_improvement=e.min_improvement,
        )
    if refusal := _footing(current, built_on, data):  # nothing to compare on a fair footing
        return GateDecision(
            passed=False,
            make_champion=False,
            verdict=refusal,
            challenger_bits_per_byte=challenger_bpb,
            champion_version=str(current.version),
            min_improvement=e.min_improvement,
        )
    champion_bpb = champion_bits_per_byte(current, config, data_dir, data, home)
    old = old_holdout(current, challenger, metrics, champion_bpb, config, data_dir, data, home)
    passed, verdict = gate(challenger_bpb, champion_bpb, e.min_improvement)
    if passed and old.forgets:
        passed, verdict = (
            False,
            (
                f"forgets: {old.challenger_bits_per_byte:.4f} against the champion's {old.champion_bits_per_byte:.4f} "
                f"bits/byte on its own holdout (data {old.data_version[:12]}), worse by {old.regression:.4f}, more than "
                f"the {e.max_regression} allowed; on the new holdout {verdict}"
            ),
        )
    return GateDecision(
        passed=passed,
        make_champion=passed and config.registry.auto_promote,
        verdict=verdict,
        challenger_bits_per_byte=challenger_bpb,
        champion_bits_per_byte=champion_bpb,
        champion_version=str(current.version),
        min_improvement=e.min_improvement,
        old_holdout=old,
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


def decide_specialist(
    config: FoundryConfig,
    challenger: Path,
    metrics: dict[str, float],
    data_dir: Path,
    data: DataVersion,
    home: Path,
    base_uri: str,
) -> GateDecision:
    """The gate of a domain fine-tune: it must beat the base model it started from on the domain holdout (the
    base re-scored there), and may lose at most `evaluation.max_regression` bits per byte on the base's own
    holdout (the forgetting guard). The base's scores on both are the `champion_*` fields of the decision. A
    specialist that has a champion already (`finetune.model_name`) must beat that one on the domain holdout too
    (re-scored there when its data version differs), or a weaker version would replace a stronger one."""
    e = config.evaluation
    if withdrawn := versions.recover(config.registry.model_name):  # left half-published by a dead run
        log.warning("withdrew versions %s of %s, left half-published", withdrawn, config.registry.model_name)
    base = versions.resolve(base_uri)
    challenger_bpb = metrics["holdout/bits_per_byte"]
    base_bpb = champion_bits_per_byte(base, config, data_dir, data, home)
    old = old_holdout(base, challenger, metrics, base_bpb, config, data_dir, data, home)
    if challenger_bpb <= base_bpb - e.min_improvement and challenger_bpb < base_bpb:
        passed, verdict = True, f"{challenger_bpb:.4f} beats the base's {base_bpb:.4f} bits/byte on the domain holdout"
    else:
        passed = False
        verdict = f"{challenger_bpb:.4f} does not beat the base's {base_bpb:.4f} bits/byte on the domain holdout"
    if passed and old.forgets:
        passed, verdict = (
            False,
            f"forgets: {old.challenger_bits_per_byte:.4f} against the base's {old.champion_bits_per_byte:.4f} "
            f"bits/byte on the base's holdout, worse by {old.regression:.4f}, more than the {e.max_regression} "
            f"allowed; on the domain holdout {verdict}",
        )
    incumbent = versions.champion(config.registry.model_name)  # fails closed: an error is not "no champion"
    incumbent_bpb = None if incumbent is None else champion_bits_per_byte(incumbent, config, data_dir, data, home)
    if passed and incumbent_bpb is not None and not challenger_bpb < incumbent_bpb:
        passed = False
        verdict = (
            f"{challenger_bpb:.4f} does not beat the specialist's champion v{incumbent.version} "
            f"({incumbent_bpb:.4f} bits/byte) on the domain holdout, though {verdict}"
        )
    return GateDecision(
        base=f"models:/{base.name}/{base.version}",
        incumbent_version=None if incumbent is None else str(incumbent.version),
        incumbent_bits_per_byte=incumbent_bpb,
        passed=passed,
        make_champion=passed and config.registry.auto_promote,
        verdict=verdict,
        challenger_bits_per_byte=challenger_bpb,
        champion_bits_per_byte=base_bpb,
        champion_version=str(base.version),
        min_improvement=e.min_improvement,
        old_holdout=old,
    )
