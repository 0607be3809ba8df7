"""What a language model's gate leaves on the candidate's run: the summary table, the verdict tags and the bits per
byte it compared."""

from __future__ import annotations

from foundry.core.contracts import Candidate
from foundry.gates.decision import Decision
from foundry.runtime import tracking


def record_gate(decision: Decision, candidate: Candidate) -> None:
    """The decision on the run: the summary table, the verdict tags and the forgetting guard's scores."""
    from foundry.reports.cards import summary_table

    run, gate = candidate.run, decision.inputs
    table = summary_table(candidate.metrics, gate.champion_bits_per_byte, decision)
    tracking.client().log_table(run.run_id, table, "evaluation/summary.json")
    tracking.set_tags(run.run_id, {"gate.verdict": decision.verdict, "gate.passed": str(decision.passed).lower()})
    scores = {}
    if gate.champion_bits_per_byte is not None:  # the champion's, or for a fine-tune its base's
        scores["gate/champion_bits_per_byte"] = gate.champion_bits_per_byte
    if gate.old_holdout is not None:
        old = gate.old_holdout
        scores |= {
            "gate/old_holdout_bits_per_byte": old.challenger_bits_per_byte,
            "gate/champion_old_holdout_bits_per_byte": old.champion_bits_per_byte,
            "gate/old_holdout_regression": old.regression,
        }
    if getattr(gate, "incumbent_bits_per_byte", None) is not None:  # a specialist's own champion, domain holdout
        scores["gate/incumbent_bits_per_byte"] = gate.incumbent_bits_per_byte
    if scores:
        tracking.log_metrics(run.run_id, scores)
