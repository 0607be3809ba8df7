"""The deployments `foundry serve` offers: the same ones prefect.yaml declares for workers.

- train:     the whole pipeline; its parameter is the config, so the Prefect UI shows it as a form
- retrain:   fine-tune the champion on what is new, on `retrain.cron` (weekly by default)
- reproduce: re-train a registered model from its lineage and compare metrics
"""

from __future__ import annotations

from foundry.config import FoundryConfig


def build_deployments(config: FoundryConfig) -> list:
    from flows.reproduce import reproduce
    from flows.retrain import retrain
    from flows.train_pipeline import train_pipeline

    parameters = {"config": config.model_dump(mode="json")}
    return [
        train_pipeline.to_deployment(name="train", parameters=parameters, tags=["foundry"],
                                     description="Raw text to a registered model: the whole pipeline."),
        retrain.to_deployment(name="retrain", parameters=parameters, cron=config.retrain.cron, tags=["foundry"],
                              description="Fine-tune the champion on new source documents; promote through the gate."),
        reproduce.to_deployment(name="reproduce", tags=["foundry"],
                                description="Re-train a registered model from its recorded data version and config."),
    ]


def serve(config: FoundryConfig) -> None:
    """Register the deployments with the configured Prefect API and run their flow runs here until stopped."""
    from prefect import serve as prefect_serve

    prefect_serve(*build_deployments(config), print_starting_message=False)
