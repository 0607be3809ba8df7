"""The alignment gate: the aligned model against the base it started from, on the same held-out alignment
data and, within `evaluation.max_regression`, on the base's pretraining holdout; then against the champion of
the name it registers under, on the same held-out data, so a weaker version never replaces a stronger one.

sft lowers the held-out response loss; dpo keeps the held-out preference accuracy (no lower) and widens the mean
margin: an SFT start already wins nearly every held-out pair, so DPO's gain is in how surely it wins them. A measure
that is missing fails its check: a comparison not made passes nothing."""

from __future__ import annotations

from foundry.gates.checks import beats
from foundry.gates.decision import Check, Decision
from foundry.gates.inputs import AlignedScores, AlignmentInputs


def decide(i: AlignmentInputs) -> Decision:
    a, b = i.aligned, i.base
    checks = {}
    if i.method == "sft":
        checks["response_loss"] = beats(a.response_loss, b.response_loss)
    else:
        checks["preference_accuracy"] = _not_lower(a.preference_accuracy, b.preference_accuracy)
        checks["preference_margin"] = _higher(a.preference_margin, b.preference_margin)
    checks["pretrain_regression"] = _within(a.pretrain_bits_per_byte, b.pretrain_bits_per_byte, i.max_regression)
    if i.incumbent_version is not None:
        checks["beats_incumbent"] = _beats_incumbent(i.method, a, i.incumbent or AlignedScores())
    outcome = "passed" if all(c.passed for c in checks.values()) else "failed"
    parts = [f"{'ok' if c.passed else 'FAILED'} {_compared(name, c, i)}" for name, c in checks.items()]
    return Decision.of(i, checks, f"{i.method} {outcome} the alignment gate: " + "; ".join(parts))


def _not_lower(a: float | None, b: float | None) -> Check:
    return Check(passed=a is not None and b is not None and a >= b, candidate=a, reference=b)


def _higher(a: float | None, b: float | None) -> Check:
    return Check(passed=a is not None and b is not None and a > b, candidate=a, reference=b)


def _within(a: float | None, b: float | None, allowance: float) -> Check:
    return Check(
        passed=a is not None and b is not None and a <= b + allowance, candidate=a, reference=b, allowance=allowance
    )


def _beats_incumbent(method: str, a: AlignedScores, champion: AlignedScores) -> Check:
    """sft: a lower held-out response loss; dpo: more preferences won, or as many with a wider margin."""
    if method == "sft":
        return beats(a.response_loss, champion.response_loss)
    check = _higher(a.preference_accuracy, champion.preference_accuracy)
    if not check.passed and a.preference_accuracy is not None and a.preference_accuracy == champion.preference_accuracy:
        return check.model_copy(update={"passed": _higher(a.preference_margin, champion.preference_margin).passed})
    return check


def _compared(name: str, c: Check, i: AlignmentInputs) -> str:
    key = {"pretrain_regression": "pretrain_bits_per_byte"}.get(name, name)
    if name == "beats_incumbent":
        key = "response_loss" if i.method == "sft" else "preference_accuracy"
    who = f"champion v{i.incumbent_version}" if name == "beats_incumbent" else "base"
    text = f"{key} {_shown(c.candidate)} vs {who} {_shown(c.reference)}"
    return text + RULES.get(name, "").format(allowance=i.max_regression)


# The rule of each base check that is not plain "better", in the verdict beside its figures.
RULES = {
    "pretrain_regression": " (may lose {allowance})",
    "preference_accuracy": " (may not be lower)",
    "preference_margin": " (must be wider)",
}


def _shown(value: float | None) -> str:
    return "?" if value is None else f"{value:.4f}"
