"""The gate of a domain fine-tune: better than its base on the domain holdout (by `min_improvement`), at most
`max_regression` worse on the base's own holdout, and better than the specialist's own champion on the
domain holdout, or a weaker version would replace a stronger one."""

from __future__ import annotations

from foundry.gates.checks import beats, forgot, no_forgetting
from foundry.gates.decision import Decision
from foundry.gates.inputs import SpecialistInputs


def decide(i: SpecialistInputs) -> Decision:
    c, b = i.challenger_bits_per_byte, i.champion_bits_per_byte
    better = beats(c, b, i.min_improvement)
    shown = "?" if b is None else f"{b:.4f}"
    verdict = (
        f"{c:.4f} {'beats' if better.passed else 'does not beat'} the base's {shown} bits/byte on the domain holdout"
    )
    kept = no_forgetting(i.old_holdout)
    if better.passed and not kept.passed and i.old_holdout is not None:
        verdict = forgot(i.old_holdout, "the base's", "the base's holdout", f"on the domain holdout {verdict}")
    checks = {"beats_base": better, "no_forgetting": kept}
    if i.incumbent_version is not None:
        checks["beats_incumbent"] = incumbent = beats(c, i.incumbent_bits_per_byte)
        if better.passed and kept.passed and not incumbent.passed:
            shown = "?" if i.incumbent_bits_per_byte is None else f"{i.incumbent_bits_per_byte:.4f}"
            verdict = (
                f"{c:.4f} does not beat the specialist's champion v{i.incumbent_version} "
                f"({shown} bits/byte) on the domain holdout, though {verdict}"
            )
    return Decision.of(i, checks, verdict)
