"""#55 point 6 against a real MLflow tracking server of its own (its own SQLite store; not the session's shared one,
where other modules' versions name S3 remotes that a purge must check and fails closed on once their moto is gone):
what the API can change (a run's tags, a version's and a model's tags and descriptions) is rewritten through it;
what it cannot (run params, dataset inputs, a deleted run's tags) is listed in the purge record by id while the
store is not Foundry's, and rewritten in the server's SQLite file once it is (`$FOUNDRY_HOME` the server's home, as
`foundry up` serves it). The same on the embedded store: tests/fast/purge/test_purge_traces.py."""

from __future__ import annotations

import socket

import pytest
from conftest import tracking_uri
from helpers_purge import mlflow_places_holding, seed_mlflow_traces
from helpers_registry import register_tagged

from foundry.cli import main
from foundry.purge import record as purge_record
from foundry.runtime import tracking

NAME = "jane_doe_letter.txt"  # a single-file source: `data.source` is its path, its documents' source its name


def _applied(capsys) -> purge_record.PurgeRecord:
    assert main(["purge", "--source", NAME, "--reason", "request 17", "--apply", "--json"]) == 0
    printed = capsys.readouterr().out
    return purge_record.PurgeRecord.model_validate_json(printed[printed.index("{") :])


@pytest.fixture
def own_mlflow_server(tmp_path):
    from foundry.ops import servers as ops

    home = tmp_path / "server"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = {"server": ops.start_mlflow(port, home, tmp_path / "mlflow.log"), "home": home}
    try:
        ops.wait_healthy(state["server"], timeout=180)
        yield state
    finally:
        ops.stop([state["server"]])


def test_a_tracking_server_keeps_only_what_its_api_cannot_change_and_the_record_lists_it(
    own_mlflow_server, tiny_config, tmp_path, monkeypatch, capsys
):
    from prefect.settings import PREFECT_HOME, temporary_settings

    state = own_mlflow_server
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    with temporary_settings({PREFECT_HOME: tmp_path / "prefect"}), tracking_uri(monkeypatch, state["server"].url):
        version = register_tagged(tiny_config, "traces-model", {})
        client = tracking.client()
        runs = seed_mlflow_traces(
            client, tracking.experiment_id("traces"), f"/srv/in/{NAME}", f"traces-model/{version.version}"
        )
        named = client.create_run(tracking.experiment_id("traces"), run_name=f"evaluate-{NAME}").info.run_id
        client.delete_run(named)  # deleted, as `foundry gc` leaves a run: its rows stay until `mlflow gc`
        record = _applied(capsys)
        left = mlflow_places_holding(client, NAME)
        assert left and not [p for p in left if p.startswith(("models:/", "model "))]  # the API changed those
        assert not [p for p in left if p == f"run {runs['kept']} tag note"]  # an active run's tag: through the API
        for place in left:  # each left place listed by its run id
            run_id = place.split(" ")[1]
            assert any(run_id in label for label in record.left_in_stores), place
        assert f"mlflow run params {runs['kept']} (data.source)" in record.left_in_stores
        # A deleted run's name and params: no API changes them, so listed as left, never counted as removed
        assert f"mlflow run name {named} (name)" in record.left_in_stores and "mlflow run name" not in record.removed
        assert f"mlflow run params {runs['deleted']} (data.source)" in record.left_in_stores
        assert record.verified  # what is left is listed, not missed
        # The server's store is Foundry's once FOUNDRY_HOME is the home it serves: rewritten in its SQLite file.
        monkeypatch.setenv("FOUNDRY_HOME", str(state["home"]))
        record = _applied(capsys)
        assert record.left_in_stores == () and record.removed["mlflow run params"] == 2
        assert record.removed["mlflow run name"] == 1 and client.get_run(named).info.run_name == "[purged]"
        assert mlflow_places_holding(client, NAME) == []
