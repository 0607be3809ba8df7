"""Foundry's Prefect events, and an example automation that acts on them.

Events (resource: the model URI, `models:/NAME/VERSION`; related: the MLflow run):
- `foundry.model.promoted`: the gate passed and the version became champion
- `foundry.model.refused`: the gate refused the version; it is `challenger`, its verdict says why
- `foundry.model.awaiting-review`: the gate passed, auto-promotion is off: a reviewer decides
- `foundry.retrain.nothing-new`: a retrain found nothing new since the champion (resource: the champion)

An automation can notify people on any of them (a Prefect notification block) or run a downstream deployment.
The example here re-trains each new champion from its lineage (the `reproduce` deployment), so a champion
that does not reproduce is noticed. `foundry serve --automations` creates it on the configured server.
"""

from __future__ import annotations

from uuid import UUID

from foundry.core.model_uri import MODELS_GLOB

REPRODUCE_NEW_CHAMPIONS = "foundry: reproduce each new champion"


def reproduce_new_champions(deployment_id: UUID):
    """On `foundry.model.promoted`, run the deployment `deployment_id` with the promoted model's URI."""
    from prefect.automations import Automation, EventTrigger, Posture, RunDeployment

    return Automation(
        name=REPRODUCE_NEW_CHAMPIONS,
        description="Re-train each new champion from its recorded data version and config, and compare.",
        trigger=EventTrigger(
            expect={"foundry.model.promoted"},
            match={"prefect.resource.id": MODELS_GLOB},
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[
            RunDeployment(
                source="selected", deployment_id=deployment_id, parameters={"model_uri": "{{ event.resource.id }}"}
            )
        ],
    )


def create_automations(reproduce_deployment: str = "reproduce/reproduce") -> list[UUID]:
    """Create the example automation on the configured Prefect server, replacing one of the same name."""
    from prefect.automations import Automation
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(reproduce_deployment)
    try:
        Automation.read(name=REPRODUCE_NEW_CHAMPIONS).delete()
    except ValueError:  # none yet
        pass
    return [reproduce_new_champions(deployment.id).create().id]
