"""#55 point 6: what MLflow keeps of a purged document in its own store (run params, tags, dataset inputs, version
and model tags and descriptions), found and removed by `foundry purge`, on the `fleet` of test_purge (its
embedded MLflow store, a SQLite file Foundry owns). A single-file source is named in `data.source` by its whole
path, which the document's source name (its file name) ends. Prefect's records need a Prefect server:
tests/slow/purge/test_purge_flow.py; a tracking server whose store is not Foundry's: test_purge_traces.py there."""

# ruff: noqa: F811  (the fixtures imported from test_purge are test arguments here)

from __future__ import annotations

import json
from pathlib import Path

from helpers_purge import mlflow_places_holding, seed_mlflow_traces
from test_purge import canary_home, fleet, without_the_unreadable_version  # noqa: F401  (fixtures)

from foundry.cli import main
from foundry.purge import record as purge_record
from foundry.purge.artifacts import Needles
from foundry.purge.plan import Criterion
from foundry.purge.trace_stores import TraceNeedles
from foundry.runtime import tracking


def _seeded(fleet) -> tuple[str, str, dict[str, str]]:
    """A canary's source name, the path a run's config named it by, and the seeded runs."""
    name = sorted(fleet.canaries.values())[0]  # secret/canary0.txt
    path = f"/srv/letters/{name}"
    runs = seed_mlflow_traces(tracking.client(), tracking.experiment_id("traces"), path, "purge-canary/1")
    return name, path, runs


def _record(printed: str) -> purge_record.PurgeRecord:
    return purge_record.PurgeRecord.model_validate_json(printed[printed.index("{") :])


def test_the_dry_run_lists_every_mlflow_record_naming_the_source_by_ids_and_keys(fleet, capsys):
    name, path, runs = _seeded(fleet)
    assert main(["purge", "--source", name, "--reason", "request 17", "--json"]) == 0
    printed = capsys.readouterr().out
    assert name not in printed  # ids and key names only
    traces = {(t["kind"], t["id"]): t for t in json.loads(printed)["traces"]}
    for run in runs.values():
        assert traces[("run params", run)]["keys"] == ["data.source"]
        assert traces[("run params", run)]["action"] == "redact" and traces[("run params", run)]["how"] == "sqlite"
        assert traces[("dataset input", run)]["keys"] == ["a" * 32]
    assert traces[("run tags", runs["kept"])]["how"] == "api"
    assert traces[("run tags", runs["deleted"])]["how"] == "sqlite"  # a deleted run's tags: no API changes them
    assert traces[("version tags", "models:/purge-canary/1")]["keys"] == ["data.source"]
    assert {("version description", "models:/purge-canary/1"), ("model description", "purge-canary")} <= set(traces)
    assert mlflow_places_holding(tracking.client(), name)  # a dry run changes nothing


def test_apply_leaves_the_source_name_in_no_run_param_tag_dataset_input_or_description(fleet, capsys, tmp_path):
    """Fails on the code before: the params, tags, dataset inputs and descriptions kept the path."""
    without_the_unreadable_version(fleet)
    name, path, runs = _seeded(fleet)
    assert main(["purge", "--source", name, "--reason", "request 17", "--apply", "--json"]) == 0
    record = _record(capsys.readouterr().out)
    assert record.verified and record.left_in_stores == ()
    assert record.removed["mlflow run params"] == 2 and record.removed["mlflow dataset input"] == 2
    client = tracking.client()
    assert mlflow_places_holding(client, name) == []
    assert mlflow_places_holding(client, "/srv/letters/") == []  # the whole path went, not only the name
    kept = client.get_run(runs["kept"])
    assert kept.data.params == {"data.source": "[purged]", "train.max_steps": "3"}  # the other params as they were
    (given,) = kept.inputs.dataset_inputs
    assert given.dataset.name == "prepared-aaaaaaaa" and {t.key: t.value for t in given.tags}["source"] == "[purged]"
    # Vacuumed: no freed page of the SQLite file (the fleet's embedded store) keeps the old rows' bytes.
    assert name.encode() not in (tmp_path / "mlflow.db").read_bytes()
    # The same purge again: nothing left to do.
    assert main(["purge", "--source", name, "--reason", "request 17", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["traces"] == []


def test_a_source_name_is_found_at_the_end_of_a_path_and_not_inside_another_name():
    found = TraceNeedles(Needles(Criterion(kind="source", value="jane.txt"), {}, {"jane.txt"}))
    assert found.hit("/data/jane.txt") and found.hit("data.source=jane.txt") and found.hit("s3://b/k/jane.txt")
    assert not found.hit("/data/mary_jane.txt") and not found.hit("/data/jane.txt2")
    regex = TraceNeedles(Needles(Criterion(kind="match", value=r"quokka\s+marmalade"), {}, set()))
    assert regex.hit(r"match=quokka\s+marmalade")  # the regex as typed: the purge flow's own parameter
    assert regex.marker == "[purged]" and regex.redacted("the quokka  marmalade") == "[purged]"


def test_an_old_purge_record_without_the_new_field_still_loads(tmp_path: Path):
    old = {
        "record": "purge-20260101T000000-0123abcd",
        "who": "a",
        "when": "2026-01-01T00:00:00+00:00",
        "reason": "r",
        "criterion": "document " + "0" * 64,
        "documents": [],
        "replaced": {},
        "removed": {},
        "models": [],
        "lost_champion": [],
        "runs": [],
        "verified": True,
    }
    assert purge_record.PurgeRecord.model_validate_json(json.dumps(old)).left_in_stores == ()


def test_a_prefect_or_mlflow_store_that_cannot_be_searched_fails_the_search(tmp_path, monkeypatch):
    """Fail closed: an API error is never "no record holds it"."""
    import socket

    import pytest
    from conftest import failing_mlflow_server
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from foundry.purge import mlflow_traces, prefect_runs, prefect_traces

    found = TraceNeedles(Needles(Criterion(kind="source", value="jane.txt"), {}, {"jane.txt"}))
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{port}/api"}):
        with pytest.raises(prefect_runs.PrefectUnreadable, match="purge refuses"):
            prefect_traces.scan(tmp_path, found)
    with failing_mlflow_server(monkeypatch, "MLFLOW_TRACKING_URI"):
        with pytest.raises(mlflow_traces.TrackingUnreadable, match="purge refuses"):
            mlflow_traces.scan(tmp_path, tracking.client(), found)


def test_a_bare_source_name_counts_as_a_whole_value_or_a_path_never_as_a_word_a_record_shares(fleet, capsys, tmp_path):
    """Fails on the code before: `--source email` found every run's `data.pii` list (which names the `email`
    detector), a note and a run name that only share the word, and rewrote them, with the data version whose
    audit counts `email` findings and the artifacts that say `email`; and it missed the run named after the
    source (`evaluate-email`), whose deleted twin kept that name in the store's `runs` table."""
    without_the_unreadable_version(fleet)
    client, experiment = tracking.client(), tracking.experiment_id("traces")
    shares = client.create_run(experiment, run_name="email-digest").info.run_id
    client.log_param(shares, "data.pii", str(["private_key", "email", "phone"]))
    client.log_param(shares, "data.source", "/srv/in/email/letters.txt")  # a folder called email: another file
    client.set_tag(shares, "note", "sent the email summary")
    client.set_terminated(shares, "FINISHED")
    names = {}
    for kept in ("active", "deleted"):
        names[kept] = client.create_run(experiment, run_name="evaluate-email").info.run_id
        client.log_param(names[kept], "data.source", "/srv/in/email")
        client.set_terminated(names[kept], "FINISHED")
    client.delete_run(names["deleted"])
    assert main(["purge", "--source", "email", "--reason", "request 18", "--json"]) == 0
    traces = json.loads(capsys.readouterr().out)["traces"]
    assert {t["id"] for t in traces} == set(names.values())  # no run of the fleet either: each has a data.pii
    assert {t["kind"] for t in traces} == {"run params", "run name"}
    assert main(["purge", "--source", "email", "--reason", "request 18", "--apply", "--json"]) == 0
    record = _record(capsys.readouterr().out)
    assert record.verified and record.left_in_stores == ()
    assert record.removed["mlflow run name"] == 2 and record.removed["mlflow run params"] == 2
    # No data version, audit line or artifact that only holds the word (the fleet's audit counts `email` finds)
    assert record.replaced == {} and {k for k, n in record.removed.items() if n} == {
        "mlflow run name",
        "mlflow run params",
    }
    shared = client.get_run(shares)
    assert shared.data.params["data.pii"] == str(["private_key", "email", "phone"])
    assert shared.data.params["data.source"] == "/srv/in/email/letters.txt"
    assert shared.data.tags["note"] == "sent the email summary" and shared.info.run_name == "email-digest"
    for run in names.values():
        got = client.get_run(run)
        assert got.data.params["data.source"] == "[purged]" and got.info.run_name == "[purged]"
        assert got.data.tags["mlflow.runName"] == "[purged]"
    assert b"evaluate-email" not in (tmp_path / "mlflow.db").read_bytes()  # the deleted run's too, before any gc
