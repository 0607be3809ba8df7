"""A trained candidate from one data version: hydrate it on this node, train on it, score the model on its
holdout. The training flows (pipeline, retrain, fine-tune) call this between their data and their gate."""

from __future__ import annotations

from prefect import runtime

from foundry.config import FoundryConfig
from foundry.core.contracts import Candidate, DataVersion, RunContext
from tasks.artifacts import name_flow_run, publish_data_stage
from tasks.data import hydrate
from tasks.evaluation import evaluate
from tasks.training import Training, train


def trained_candidate(config: FoundryConfig, data: DataVersion, run: RunContext) -> Candidate:
    """Hydrate `data`, train (resuming an unfinished attempt), evaluate: the value the gate judges."""
    data_dir = hydrate(data, run)
    name_flow_run(f"{runtime.flow_run.name}-{data.data_version[:8]}")
    publish_data_stage(data_dir)
    checkpoint = train(Training(config, data_dir, data, run))
    metrics = evaluate(config, checkpoint, data_dir, run)
    return Candidate(checkpoint=checkpoint, data=data, data_dir=data_dir, metrics=metrics, run=run)
