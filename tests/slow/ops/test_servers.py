"""Operations against real servers on 127.0.0.1: Prefect server, MLflow server, S3 (moto) for the DVC
remote and MLflow's artifacts, and `foundry serve` running the deployments, triggered as the UI's
Run button does."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO_ROOT
from homes import seeded_home

from foundry.config import load_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _copy_stdlib(package: str, dest: Path) -> None:
    shutil.copytree(
        Path(sysconfig.get_paths()["stdlib"]) / package,
        dest / package,
        ignore=shutil.ignore_patterns("__pycache__", "test*"),
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory, moto_s3):
    """Prefect and MLflow servers (artifacts in S3) plus a `foundry serve` process, all on loopback."""
    import boto3

    from foundry.ops import servers as ops

    root = tmp_path_factory.mktemp("stack")
    aws = {
        "AWS_ENDPOINT_URL_S3": moto_s3,
        "MLFLOW_S3_ENDPOINT_URL": moto_s3,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_s3,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    for bucket in ("mlflow-artifacts", "dvc"):
        s3.create_bucket(Bucket=bucket)
    saved = dict(os.environ)
    os.environ.update(aws)
    os.environ["FOUNDRY_HOME"] = str(root / "servers")
    # A run queued behind the deployment's concurrency limit is tried again after this (Prefect's default, 30 s,
    # was most of the twin retrains' time); it still passes through AwaitingConcurrencySlot.
    os.environ["PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS"] = "2"
    logs = root / "servers" / "logs"
    logs.mkdir(parents=True)
    home = seeded_home(root / "servers")
    prefect = ops.start_prefect(_free_port(), home, logs / "prefect.log")
    mlflow = ops.start_mlflow(_free_port(), home, logs / "mlflow.log", artifacts="s3://mlflow-artifacts/")
    servers = [prefect, mlflow]
    serve = None
    try:
        for server in servers:
            ops.wait_healthy(server, timeout=180)
        env = {
            **os.environ,
            "PREFECT_API_URL": f"{prefect.url}/api",
            "MLFLOW_TRACKING_URI": mlflow.url,
            "FOUNDRY_HOME": str(root / "worker"),
            "PREFECT_RUNNER_POLL_FREQUENCY": "1",  # a run is picked up within a second of its creation
            "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
            # The operator's settings: the deployments' forms may use this source folder and this remote.
            "FOUNDRY_SOURCE_ROOTS": str(root / "source"),
            "FOUNDRY_ALLOWED_REMOTES": "s3://dvc",
        }
        env.pop("PREFECT_HOME", None)
        serve = subprocess.Popen(
            [sys.executable, "-m", "foundry.cli", "serve", "--config", "configs/tiny.yaml", "--automations"],
            cwd=REPO_ROOT,
            env=env,
            stdout=open(logs / "serve.log", "wb"),
            stderr=subprocess.STDOUT,
        )
        yield {"prefect": prefect.url, "mlflow": mlflow.url, "s3": s3, "root": root, "logs": logs, "serve": serve}
    finally:
        if serve is not None:
            serve.terminate()
            serve.wait(timeout=30)
        ops.stop(servers)
        os.environ.clear()
        os.environ.update(saved)


def _run_deployment(stack, name: str, parameters: dict, timeout: float = 600):
    """What the UI's Run button does: a flow run of the deployment with these parameters, then wait."""
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: f"{stack['prefect']}/api"}):
        deadline = time.time() + 120
        while True:  # `foundry serve` registers the deployments once it has imported everything
            try:
                # Asked every second whether it finished (Prefect's default, 5 s, was idle time after each run).
                return run_deployment(name, parameters=parameters, timeout=timeout, poll_interval=1)
            except Exception as exc:  # ObjectNotFound until registered
                if time.time() > deadline or stack["serve"].poll() is not None:
                    log = (stack["logs"] / "serve.log").read_text()[-3000:]
                    raise AssertionError(f"{name} never became runnable: {exc}\n{log}") from exc
                time.sleep(0.5)


def _example_automation_was_created_then_removed(stack) -> None:
    """`foundry serve --automations` created the example automation, acting on the reproduce deployment.
    Removed again, so that this test's promotions do not start reproductions beside it."""
    from prefect.automations import Automation
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.automations import REPRODUCE_NEW_CHAMPIONS

    deadline = time.time() + 180
    with temporary_settings({PREFECT_API_URL: f"{stack['prefect']}/api"}):
        while True:
            try:
                automation = Automation.read(name=REPRODUCE_NEW_CHAMPIONS)
                break
            except ValueError:
                assert time.time() < deadline, (stack["logs"] / "serve.log").read_text()[-3000:]
                time.sleep(0.5)
        with get_client(sync_client=True) as client:
            reproduce = client.read_deployment_by_name("reproduce/reproduce")
        assert [a.deployment_id for a in automation.actions] == [reproduce.id]
        assert automation.trigger.expect == {"foundry.model.promoted"}
        automation.delete()


def _finished(stack, runs, timeout: float = 600) -> list:
    """The flow runs, read again until each is in a final state."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    deadline = time.time() + timeout
    with temporary_settings({PREFECT_API_URL: f"{stack['prefect']}/api"}), get_client(sync_client=True) as client:
        while True:
            current = [client.read_flow_run(run.id) for run in runs]
            if all(run.state.is_final() for run in current) or time.time() > deadline:
                return current
            time.sleep(0.5)


def _state_names(stack, run) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: f"{stack['prefect']}/api"}), get_client(sync_client=True) as client:
        return [state.name for state in client.read_flow_run_states(run.id)]


def test_train_then_retrain_through_deployments(stack):
    from mlflow import MlflowClient

    source = stack["root"] / "source"
    _copy_stdlib("email", source)
    config = load_config(
        REPO_ROOT / "configs" / "tiny.yaml",
        [
            f"data.source={source}",
            "data.remote=s3://dvc/remote",
            "registry.model_name=srv-gpt",
            "train.max_steps=30",  # the first version is champion whatever its score ("no champion yet")
            "retrain.train.max_steps=20",
        ],
    )
    parameters = {"config": config.model_dump(mode="json")}

    _example_automation_was_created_then_removed(stack)
    flow_run = _run_deployment(stack, "train_pipeline/train", parameters)
    assert flow_run.state.is_completed(), (stack["logs"] / "serve.log").read_text()[-3000:]
    client = MlflowClient(tracking_uri=stack["mlflow"])
    champion = client.get_model_version_by_alias("srv-gpt", "champion")
    assert str(champion.version) == "1"
    assert champion.tags["data.remote"] == "s3://dvc/remote"
    keys = [o["Key"] for o in stack["s3"].list_objects_v2(Bucket="mlflow-artifacts").get("Contents", [])]
    assert any(k.endswith("model.pt") for k in keys)  # artifacts went through the MLflow server into S3
    assert stack["s3"].list_objects_v2(Bucket="dvc", Prefix="remote/files/md5/")["KeyCount"] > 0

    # Two retrains at once: the deployment runs one at a time, the second waits in the queue.
    twins = [_run_deployment(stack, "retrain/retrain", parameters, timeout=0) for _ in range(2)]
    first, second = sorted(_finished(stack, twins), key=lambda run: run.start_time)
    assert first.state.is_completed() and second.state.is_completed()
    assert first.end_time <= second.start_time
    assert "AwaitingConcurrencySlot" in _state_names(stack, second)
    assert len(client.search_model_versions("name='srv-gpt'")) == 1  # nothing new: nothing trained

    _copy_stdlib("json", source)  # new documents arrive in the source
    retrained = _run_deployment(stack, "retrain/retrain", parameters)
    assert retrained.state.is_completed(), (stack["logs"] / "serve.log").read_text()[-3000:]
    second = client.get_model_version("srv-gpt", "2")
    assert second.tags["parent_model"] == "models:/srv-gpt/1"
    assert second.tags["gate.verdict"] and second.tags["gate.champion_version"] == "1"
    assert second.tags["gate.passed"] in ("true", "false")
    assert second.tags["data_version"] != champion.tags["data_version"]
    run = client.get_run(second.run_id)
    assert run.data.metrics["retrain/new_files"] > 0
    assert run.data.params["train.init_from"].endswith("model.pt")


def _forged_copy(stack, name: str, **tags: str) -> str:
    """srv-gpt/1 (registered by the test above) registered again under `name` with `tags` in place of its own:
    what someone who can write to the registry can do. `models:/NAME/1`."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=stack["mlflow"])
    original = client.get_model_version("srv-gpt", "1")  # from test_train_then_retrain_through_deployments
    client.create_registered_model(name)
    version = client.create_model_version(
        name,
        original.source,
        original.run_id,
        tags={**original.tags, **tags},
        model_id=original.model_id or original.source.removeprefix("models:/"),
    )
    return f"models:/{name}/{version.version}"


def test_the_reproduce_deployment_refuses_a_recorded_file_or_remote_outside_the_operators_settings(stack):
    """A version whose recorded config (the `config` tag, read before the run's file) names a checkpoint outside
    $FOUNDRY_HOME and the source roots, and one whose data remote is not s3://dvc: both refused before anything
    is hydrated or trained (#55 point 7)."""
    recorded = load_config(REPO_ROOT / "configs" / "tiny.yaml", ["train.init_from=/etc/hostname"])
    forged_file = _forged_copy(stack, "srv-forged-file", config=recorded.model_dump_json())
    run = _run_deployment(stack, "reproduce/reproduce", {"model_uri": forged_file, "force": True})
    assert run.state.is_failed(), (stack["logs"] / "serve.log").read_text()[-3000:]
    assert "train.init_from = '/etc/hostname' is not allowed" in run.state.message, run.state.message

    forged_remote = _forged_copy(stack, "srv-forged-remote", **{"data.remote": "s3://elsewhere/dvc"})
    run = _run_deployment(stack, "reproduce/reproduce", {"model_uri": forged_remote, "force": True})
    assert run.state.is_failed(), (stack["logs"] / "serve.log").read_text()[-3000:]
    message = run.state.message
    assert "the data version's remote 's3://elsewhere/dvc' is not allowed" in message, message
    assert "FOUNDRY_ALLOWED_REMOTES" in message


def test_a_deployment_run_pointing_outside_the_operators_settings_is_refused(stack):
    from mlflow import MlflowClient

    config = load_config(
        REPO_ROOT / "configs" / "tiny.yaml", ["data.scheduler=tcp://10.9.9.9:8786", "registry.model_name=refused-gpt"]
    )
    flow_run = _run_deployment(stack, "train_pipeline/train", {"config": config.model_dump(mode="json")})
    assert flow_run.state.is_failed()
    expected = "data.scheduler = 'tcp://10.9.9.9:8786' is not allowed (the worker's operator can allow it in "
    assert expected + "FOUNDRY_ALLOWED_SCHEDULERS)" in flow_run.state.message
    client = MlflowClient(tracking_uri=stack["mlflow"])
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, "params.`registry.model_name` = 'refused-gpt'")
    assert runs == []  # refused before any work: no MLflow run


def test_purge_and_gc_deployments_delete_and_read_remotes_only_where_the_operator_allows(stack):
    """The served worker allows the remote s3://dvc and lists no deployment in FOUNDRY_ALLOWED_APPLY (#55 point 7)."""
    outside = _run_deployment(
        stack, "purge/purge", {"reason": "request 7", "match": "canary-7f3a", "remote": "s3://elsewhere/dvc"}
    )
    assert outside.state.is_failed()
    assert "remote = 's3://elsewhere/dvc' is not allowed" in outside.state.message
    assert "FOUNDRY_ALLOWED_REMOTES" in outside.state.message
    purge = _run_deployment(stack, "purge/purge", {"reason": "request 7", "match": "canary-7f3a", "apply": True})
    assert purge.state.is_failed() and "apply = true is not allowed for purge" in purge.state.message
    assert not (stack["root"] / "worker" / "purged").exists()  # refused before any search: no mark, no key
    gc = _run_deployment(stack, "gc/gc", {"apply": True})
    assert gc.state.is_failed() and "apply = true is not allowed for gc" in gc.state.message
    listed = _run_deployment(stack, "gc/gc", {})  # the dry run, which deletes nothing, stays open to the form
    assert listed.state.is_completed(), (stack["logs"] / "serve.log").read_text()[-3000:]


def test_prefect_yaml_is_written_from_the_served_deployments():
    """One table of deployments: `foundry serve` builds them, prefect.yaml is generated from them."""
    from flows.deployments import DEPLOYMENTS, build_deployments, prefect_yaml

    config = load_config(REPO_ROOT / "params.yaml")  # what `foundry serve` and `foundry deployments` read
    assert (REPO_ROOT / "prefect.yaml").read_text() == prefect_yaml(config), (
        "run: foundry deployments --write prefect.yaml"
    )
    declared = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"]
    served = build_deployments(config)
    assert [d["name"] for d in declared] == [d.name for d in served] == [d.name for d in DEPLOYMENTS]
    assert next(d for d in declared if d["name"] == "retrain")["schedules"] == [{"cron": config.retrain.cron}]
    for entry, deployment in zip(declared, served):
        assert deployment.entrypoint.endswith(entry["entrypoint"])
