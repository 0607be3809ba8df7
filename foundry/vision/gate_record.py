"""What an image classifier's gate leaves on the candidate's run: the summary table, the verdict tags and the
accuracies it compared."""

from __future__ import annotations

from foundry.core.contracts import Candidate
from foundry.gates.decision import Decision
from foundry.runtime import tracking


def record_gate(decision: Decision, candidate: Candidate) -> None:
    """Its accuracy table, the verdict, the champion's accuracies."""
    from foundry.reports.vision_card import vision_summary_table

    run, gate = candidate.run, decision.inputs
    tracking.client().log_table(
        run.run_id, vision_summary_table(candidate.metrics, decision), "evaluation/summary.json"
    )
    tracking.set_tags(run.run_id, {"gate.verdict": decision.verdict, "gate.passed": str(decision.passed).lower()})
    scores = {} if gate.champion_accuracy is None else {"gate/champion_accuracy": gate.champion_accuracy}
    if getattr(gate, "incumbent_accuracy", None) is not None:  # a specialist's own champion, new holdout
        scores["gate/incumbent_accuracy"] = gate.incumbent_accuracy
    if gate.old_holdout is not None:
        old = gate.old_holdout
        scores |= {
            "gate/old_holdout_accuracy": old.challenger_accuracy,
            "gate/champion_old_holdout_accuracy": old.champion_accuracy,
            "gate/old_holdout_regression": old.regression,
        }
    if scores:
        tracking.log_metrics(run.run_id, scores)
