"""A deployment's parameters reach infrastructure only where the worker's operator allows (#30 point 7)."""

from __future__ import annotations

import pytest

from foundry.config import load_config
from foundry.runtime.deployment_policy import (
    NotAllowed,
    OperatorSettings,
    check_deployment_config,
    check_reproduction,
    refusals,
    served_config_allowed,
)
from tasks.policy import allowed_by_operator, fleet_operation_allowed, reproduction_allowed


def refused(home, *overrides: str, **env: str) -> list[str]:
    return refusals(load_config(None, list(overrides)), OperatorSettings.from_env(env), home)


def test_the_defaults_pass_with_no_settings(tmp_path):
    assert refused(tmp_path) == []


@pytest.mark.parametrize(
    ("override", "variable"),
    [
        ("data.scheduler=tcp://10.0.0.5:8786", "FOUNDRY_ALLOWED_SCHEDULERS"),
        ("search.scheduler=tcp://10.0.0.5:8786", "FOUNDRY_ALLOWED_SCHEDULERS"),
        ("data.remote=s3://elsewhere/x", "FOUNDRY_ALLOWED_REMOTES"),
        ("search.storage=postgresql://db/optuna", "FOUNDRY_ALLOWED_STORAGES"),
        ("data.source=/etc/passwd", "FOUNDRY_SOURCE_ROOTS"),
        ("train.init_from=/tmp/evil.pt", "FOUNDRY_SOURCE_ROOTS"),
    ],
)
def test_each_infrastructure_key_is_refused_naming_key_value_and_setting(tmp_path, override, variable):
    key, value = override.split("=", 1)
    assert refused(tmp_path / "home", override) == [
        f"{key} = {value!r} is not allowed (the worker's operator can allow it in {variable})"
    ]


def test_listed_values_pass(tmp_path):
    allowed = refused(
        tmp_path,
        "data.scheduler=tcp://10.0.0.5:8786",
        "data.remote=s3://dvc/team/remote",
        "search.storage=postgresql://db/optuna",
        f"data.source={tmp_path}/corpus/**/*.txt",
        FOUNDRY_ALLOWED_SCHEDULERS="tcp://10.0.0.5:8786",
        FOUNDRY_ALLOWED_REMOTES="s3://dvc/team",
        FOUNDRY_ALLOWED_STORAGES="postgresql://db/optuna",
        FOUNDRY_SOURCE_ROOTS=f"{tmp_path}/corpus",
    )
    assert allowed == []


def test_a_remote_beside_an_allowed_one_is_not_under_it(tmp_path):
    assert len(refused(tmp_path, "data.remote=s3://dvc-other/x", FOUNDRY_ALLOWED_REMOTES="s3://dvc")) == 1


def test_sources_that_climb_or_link_out_of_a_root_are_refused(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "etc").symlink_to("/etc")
    roots = {"FOUNDRY_SOURCE_ROOTS": str(root)}
    assert refused(tmp_path, f"data.source={root}/etc", **roots) != []
    assert refused(tmp_path, f"data.source={root}/*/../../*.txt", **roots) != []
    assert refused(tmp_path, "data.source=stdlib://../../../etc", **roots) != []
    assert refused(tmp_path, "data.source=stdlib://email", **roots) == []


def test_every_problem_is_named_in_one_error(tmp_path):
    config = load_config(None, ["data.scheduler=tcp://x:1", "data.remote=/tmp/elsewhere"])
    with pytest.raises(
        NotAllowed, match=r"^refused for a run started from a deployment: data.scheduler .*; data.remote"
    ):
        check_deployment_config(config, OperatorSettings(), tmp_path)


def test_the_served_config_joins_the_allow_lists(tmp_path):
    config = load_config(None, [f"data.source={tmp_path}/src", "data.remote=s3://dvc/r"])
    env = served_config_allowed(config, {"FOUNDRY_ALLOWED_REMOTES": "s3://other"})
    assert env == {"FOUNDRY_ALLOWED_REMOTES": "s3://other,s3://dvc/r", "FOUNDRY_SOURCE_ROOTS": str(tmp_path / "src")}
    assert refusals(config, OperatorSettings.from_env(env), tmp_path) == []


def test_the_flow_task_checks_runs_from_a_deployment_only(tmp_path, monkeypatch):
    config = load_config(None, ["data.scheduler=tcp://10.0.0.5:8786"])
    allowed_by_operator.fn(config)  # no deployment: the operator's own run
    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", "00000000-0000-0000-0000-000000000001")
    with pytest.raises(NotAllowed, match="data.scheduler = 'tcp://10.0.0.5:8786'"):
        allowed_by_operator.fn(config)


# --- purge, gc and reproduce (#55 point 7) -----------------------------------------------------------------------


@pytest.fixture
def from_a_deployment(monkeypatch):
    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", "00000000-0000-0000-0000-000000000001")


def test_a_purge_from_a_deployment_reads_only_allowed_remotes_and_deletes_only_when_allowed(
    from_a_deployment, monkeypatch
):
    fleet_operation_allowed.fn("purge", False, "")  # the dry run on the home's own stores
    with pytest.raises(NotAllowed, match=r"remote = 's3://elsewhere/x' is not allowed .*FOUNDRY_ALLOWED_REMOTES"):
        fleet_operation_allowed.fn("purge", False, "s3://elsewhere/x")
    with pytest.raises(NotAllowed, match=r"apply = true is not allowed for purge .*FOUNDRY_ALLOWED_APPLY"):
        fleet_operation_allowed.fn("purge", True, "")
    monkeypatch.setenv("FOUNDRY_ALLOWED_REMOTES", "s3://team")
    monkeypatch.setenv("FOUNDRY_ALLOWED_APPLY", "purge")
    fleet_operation_allowed.fn("purge", True, "s3://team/dvc")
    with pytest.raises(NotAllowed, match="apply = true is not allowed for gc"):
        fleet_operation_allowed.fn("gc", True)


def test_the_operators_own_purge_and_gc_are_trusted():
    fleet_operation_allowed.fn("purge", True, "s3://elsewhere/x")
    fleet_operation_allowed.fn("gc", True)


def test_a_reproduction_from_a_deployment_is_held_to_its_recorded_files_and_data_remote(from_a_deployment, tmp_path):
    from foundry.core.contracts import DataVersion

    data = DataVersion(data_version="0" * 32, remote="")
    recorded = load_config(None, ["data.source=/data/elsewhere"])  # not read: the data version is hydrated
    check_reproduction(recorded, "", OperatorSettings.from_env({}), tmp_path / "home")
    home_remote = str(tmp_path / "home" / "dvc-remote")  # where a default run pushed it
    check_reproduction(recorded, home_remote, OperatorSettings.from_env({}), tmp_path / "home")
    with pytest.raises(NotAllowed, match=r"train.init_from = '/tmp/evil.pt' is not allowed"):
        reproduction_allowed.fn(load_config(None, ["train.init_from=/tmp/evil.pt"]), data)
    with pytest.raises(NotAllowed, match=r"the data version's remote 's3://elsewhere/x' is not allowed"):
        reproduction_allowed.fn(recorded, data.model_copy(update={"remote": "s3://elsewhere/x"}))
