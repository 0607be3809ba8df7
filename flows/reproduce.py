"""Re-train a registered model from its lineage: the recorded data version and config, fresh weights.

    foundry reproduce models:/foundry-gpt@champion [--force]
"""

from __future__ import annotations

import foundry  # noqa: F401  (environment before Prefect loads)
from prefect import flow

from foundry.config import validate
from flows.train_pipeline import pipeline_run
from tasks import tracking
from tasks.lineage import lineage
from tasks.pipeline import evaluate, hydrate, train
from tasks.versioning import version_ref

COMPARED = ("holdout/loss", "holdout/bits_per_byte", "holdout/perplexity")


class CommitMismatch(RuntimeError):
    """The code differs from the code that trained the model."""


@flow(name="reproduce")
def reproduce(model_uri: str, force: bool = False) -> dict:
    """Hydrate the model's data version, train with its config, and compare holdout metrics."""
    record = lineage(model_uri, depth=1)[0]
    current = tracking.git_state()["git_commit"]
    if record["git_commit"] != current and not force:
        raise CommitMismatch(
            f"{record['model']} was trained at commit {record['git_commit']}, this code is at {current}: "
            f"check out {record['git_commit']} to reproduce it exactly, or pass --force to re-train anyway"
        )
    config = validate(record["config"])
    with pipeline_run(config, run_name=f"reproduce {record['model']}") as run:
        tracking.set_tags(run.run_id, {"foundry.reproduces": record["model"], "foundry.stage": "reproduce"})
        data = version_ref(record["data_version"], record["data.remote"])
        data_dir = hydrate(data, run)
        checkpoint = train(config, data_dir, data, run, resume=False)
        metrics = evaluate(config, checkpoint, data_dir, run)
    recorded = tracking.client().get_model_version(*record["model"].removeprefix("models:/").split("/")).tags
    comparison = {key: (float(recorded[key]), round(metrics[key], 6)) for key in COMPARED if key in recorded}
    identical = all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in comparison.values())
    return {"model": record["model"], "run_id": run.run_id, "comparison": comparison, "identical": identical,
            "commit_matches": record["git_commit"] == current}
