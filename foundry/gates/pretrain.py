"""The pretraining and retraining gate: better than the champion of the same name on the challenger's
holdout by `evaluation.min_improvement`, and not worse by more than `evaluation.max_regression` on the
champion's own holdout. A champion the data was not built on cannot be compared fairly: refused.

One rule for every modality: text is scored in bits per byte (lower is better, `PretrainInputs`), an image
classifier by holdout accuracy (higher is better, `ImageInputs`, in `foundry.vision.gate_inputs`); the inputs (any
`AgainstChampion`) name their measure."""

from __future__ import annotations

from foundry.gates.checks import beats, forgot, no_forgetting
from foundry.gates.decision import Check, Decision
from foundry.gates.inputs import AgainstChampion


def decide(i: AgainstChampion) -> Decision:
    if i.champion_version is None:
        return Decision.of(i, {}, "no champion yet")
    if i.footing:
        return Decision.of(i, {"footing": Check(passed=False)}, i.footing)
    c, r, unit = i.challenger, i.champion, i.measure.unit
    better = beats(c, r, i.min_improvement, i.measure)
    if better.passed:
        verdict = f"{c:.4f} beats champion's {r:.4f} {unit}"
    else:
        verdict = f"{c:.4f} does not beat champion's {_or_unknown(r)} {unit} by {i.min_improvement}"
    kept = no_forgetting(i.old_holdout)
    if better.passed and not kept.passed and i.old_holdout is not None:
        old = i.old_holdout
        where = f"its own holdout (data {old.data_version[:12]})"
        verdict = forgot(old, "the champion's", where, f"on the new holdout {verdict}")
    if i.old_holdout is not None and i.old_holdout.purge_note:
        verdict += f"; the champion's {i.old_holdout.purge_note}"
    return Decision.of(i, {"beats_champion": better, "no_forgetting": kept}, verdict)


def _or_unknown(value: float | None) -> str:
    return "?" if value is None else f"{value:.4f}"
