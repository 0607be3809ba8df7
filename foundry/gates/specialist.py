"""The gate of a domain fine-tune: better than its base on the domain holdout (by `min_improvement`), at most
`max_regression` worse on the base's own holdout, and better than the specialist's own champion on the
domain holdout, or a weaker version would replace a stronger one.

One rule for both modalities: a text specialist by bits per byte (lower is better, `SpecialistInputs`), an image
classifier by holdout accuracy (higher is better, `ImageSpecialistInputs`, in `foundry.vision.gate_inputs`); the
inputs (any `AgainstBase`) name their measure."""

from __future__ import annotations

from foundry.gates.checks import beats, forgot, no_forgetting
from foundry.gates.decision import Decision
from foundry.gates.inputs import AgainstBase


def decide(i: AgainstBase) -> Decision:
    c, b, measure = i.challenger, i.champion, i.measure
    better = beats(c, b, i.min_improvement, measure)
    shown = "?" if b is None else f"{b:.4f}"
    verdict = (
        f"{c:.4f} {'beats' if better.passed else 'does not beat'} the base's {shown} {measure.unit} on the domain "
        "holdout"
    )
    kept = no_forgetting(i.old_holdout)
    if better.passed and not kept.passed and i.old_holdout is not None:
        verdict = forgot(i.old_holdout, "the base's", "the base's holdout", f"on the domain holdout {verdict}")
    checks = {"beats_base": better, "no_forgetting": kept}
    if i.incumbent_version is not None:
        theirs = getattr(i, f"incumbent_{measure.name}")
        checks["beats_incumbent"] = incumbent = beats(c, theirs, 0.0, measure)
        if better.passed and kept.passed and not incumbent.passed:
            shown = "?" if theirs is None else f"{theirs:.4f}"
            verdict = (
                f"{c:.4f} does not beat the specialist's champion v{i.incumbent_version} "
                f"({shown} {measure.unit}) on the domain holdout, though {verdict}"
            )
    if i.old_holdout is not None and i.old_holdout.purge_note:  # the base kept serving after a purge
        verdict += f"; the base's {i.old_holdout.purge_note}"
    return Decision.of(i, checks, verdict)
