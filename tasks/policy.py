"""The operator's check of a deployment's parameters (`foundry.runtime.deployment_policy`), as every flow's first task."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from foundry.config import FoundryConfig
from foundry.core.contracts import DataVersion


@task(name="operator-settings", cache_policy=NO_CACHE)
def allowed_by_operator(config: FoundryConfig) -> None:
    """Refuse a run started from a deployment whose config points where the worker's operator did not allow;
    a run started by the operator's own CLI or Python (no deployment) is trusted."""
    from prefect.runtime import deployment

    from foundry.runtime.deployment_policy import OperatorSettings, check_deployment_config
    from foundry.runtime.env import foundry_home

    if deployment.id is None:
        return
    check_deployment_config(config, OperatorSettings.from_env(), foundry_home())


@task(name="operator-settings", cache_policy=NO_CACHE)
def fleet_operation_allowed(name: str, apply: bool, remote: str = "") -> None:
    """Refuse a `purge` or `gc` run started from a deployment that deletes, or reads a remote, where the worker's
    operator did not allow; the operator's own CLI is trusted."""
    from prefect.runtime import deployment

    from foundry.runtime.deployment_policy import OperatorSettings, check_fleet_operation

    if deployment.id is None:
        return
    check_fleet_operation(name, apply, remote, OperatorSettings.from_env())


@task(name="operator-settings", cache_policy=NO_CACHE)
def reproduction_allowed(config: FoundryConfig, data: DataVersion) -> None:
    """Refuse a reproduction started from a deployment whose recorded config or data remote the worker's operator
    did not allow."""
    from prefect.runtime import deployment

    from foundry.runtime.deployment_policy import OperatorSettings, check_reproduction
    from foundry.runtime.env import foundry_home

    if deployment.id is None:
        return
    check_reproduction(config, data.remote, OperatorSettings.from_env(), foundry_home())
