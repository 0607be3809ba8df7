"""`purge_home`: the places under $FOUNDRY_HOME beside the data stores (runs/, sources/, logs/, the embedded
MLflow artifact store) found by `scan` and rewritten by `scrub` until no byte of the home holds the canary.
Real files, a real embedded MLflow store, a real http mirror made by `acquire` from a loopback server. The
Prefect artifacts need a Prefect API: `helpers.prefect_artifacts_scrubbed` checks them in the slow lane."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from conftest import tracking_uri
from helpers_configs import tiny
from homes import seeded_mlflow_store

from foundry.purge import artifacts as purge_artifacts
from foundry.purge import home as purge_home
from foundry.purge.plan import Criterion
from foundry.runtime import tracking

CANARY = "quokka marmalade"
DOCUMENT = f"a first line of it\nthe {CANARY} jar\n"  # the matched document as prepare kept it
NAME = "secret/canary0.txt"
CLEAN = "river stone light\n"


def needles(pattern: str = CANARY) -> purge_artifacts.Needles:
    sha = hashlib.sha256(DOCUMENT.encode()).hexdigest()
    return purge_artifacts.Needles(Criterion(kind="match", value=pattern), {sha: DOCUMENT}, {NAME})


def plant(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


def holding(root: Path, needle: bytes) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and needle in p.read_bytes()
    )


@pytest.fixture()
def planted(tmp_path, monkeypatch) -> Path:
    """A home with an embedded MLflow store whose run logged text artifacts, and runs/, sources/, logs/ files
    holding the canary (or naming its source file) beside files that do not."""
    home = tmp_path / "home"
    monkeypatch.setenv("FOUNDRY_HOME", str(home))
    with tracking_uri(monkeypatch, seeded_mlflow_store(home / "mlflow" / "mlflow.db")):
        run_id = tracking.start_pipeline_run(tiny(), run_name="purge-home")
        lines = [json.dumps({"text": t}) + "\n" for t in ("plain words", DOCUMENT, "more plain words")]
        for name, text in {"train.jsonl": "".join(lines), "audit.md": f"# audit\n{CLEAN}the {CANARY}\n"}.items():
            tracking.log_artifact(run_id, plant(tmp_path / "logged" / name, text), "data")
        tracking.log_artifact(run_id, plant(tmp_path / "logged" / "model.pt", b"\0weights\0"), "checkpoints")
        table = {"prompt": ["a", "b"], "completion": ["river", f"the {CANARY} garden"]}
        tracking.client().log_table(run_id, table, "evaluation/gen.json")
        tracking.end_run(run_id, True)
        run = home / "runs" / run_id
        manifest = {"entries": [{"name": "doc00.txt", "sha256": "0" * 64}, {"name": NAME, "sha256": "1" * 64}]}
        plant(run / "source_manifest.json", json.dumps(manifest, indent=1))
        plant(run / "validation_report.json", json.dumps({"ok": True, "sample": CLEAN}))
        plant(run / "prepared" / "train.jsonl", "".join(lines))  # a dead run's staging folder
        plant(run / "prepared" / "train_000.bin", b"\1\0\2\0")
        plant(home / "logs" / "run-1.log", f"started\nkept {DOCUMENT}done\n")
        plant(home / "logs" / "mlflow-server.log", CLEAN)
        plant(tmp_path / "outside.txt", CANARY)
        (home / "logs" / "link.log").symlink_to(tmp_path / "outside.txt")
        s3 = home / "sources" / "s3" / "0123456789abcdef"
        plant(s3 / "docs" / "a.txt", DOCUMENT)
        plant(s3 / "docs" / "b.txt", CLEAN)
        state = {k: {"etag": f'"{k}"'} for k in ("docs/a.txt", "docs/b.txt")}
        plant(s3.parent / f"{s3.name}.origin.json", json.dumps(state))
        yield home


def test_scrub_removes_every_copy_under_the_home_and_nothing_else(planted, tmp_path):
    home, found = planted, needles()
    artifacts = home / "mlflow" / "artifacts"
    mlflow_hits, _ = purge_artifacts.scan(artifacts, found)
    hits = purge_home.scan(home, found, prefect=False)
    assert {h.path.split("/artifacts/", 1)[1] for h in mlflow_hits} == {
        "data/train.jsonl",
        "data/audit.md",
        "evaluation/gen.json",
    }
    run = next((home / "runs").iterdir()).name
    assert {(h.place, h.where) for h in hits} == {
        ("run files", f"runs/{run}/source_manifest.json"),  # names the source file
        ("run files", f"runs/{run}/prepared/train.jsonl"),
        ("source mirror", "sources/s3/0123456789abcdef/…"),  # the file's name is not shown
        ("log", "logs/run-1.log"),
    }
    touched = {h.path for h in hits} | {f"mlflow/artifacts/{h.path}" for h in mlflow_hits}
    before = {p: d for p, d in digests(home).items() if p not in touched and not p.startswith(f"runs/{run}/prepared")}

    counts = purge_home.scrub(home, found, [*mlflow_hits, *hits])

    assert counts == {"mlflow artifacts": 3, "run files": 2, "source mirror": 1, "log": 1}
    assert holding(home, CANARY.encode()) == [] and holding(home, NAME.encode()) == []  # every byte, SQLite too
    after = digests(home)
    assert {p: after.get(p) for p in before if not p.endswith(".origin.json")} == {
        p: d for p, d in before.items() if not p.endswith(".origin.json")
    }
    assert not (home / "runs" / run / "prepared").exists()  # shards and all
    assert (home / "logs" / "run-1.log").read_text() == "started\ndone\n"  # the document's two lines, no other
    train = (next(artifacts.rglob("train.jsonl"))).read_text().splitlines()
    assert [json.loads(line)["text"] for line in train] == ["plain words", "more plain words"]
    table = json.loads(next(artifacts.rglob("gen.json")).read_text())
    assert table["data"] == [["a", "river"], ["b", "[purged]"]]  # still a table
    entries = json.loads((home / "runs" / run / "source_manifest.json").read_text())["entries"]
    assert [e["name"] for e in entries] == ["doc00.txt", "[purged]"]
    state = json.loads((home / "sources" / "s3" / "0123456789abcdef.origin.json").read_text())
    assert set(state) == {"docs/b.txt"}  # the next sync downloads a.txt again: it records no ETag for it
    assert (tmp_path / "outside.txt").read_text() == CANARY  # a link is never followed

    assert purge_home.scan(home, found, prefect=False) == [] and purge_artifacts.scan(artifacts, found)[0] == []
    again = digests(home)
    assert set(purge_home.scrub(home, found, [*mlflow_hits, *hits]).values()) <= {0}
    assert digests(home) == again


def test_a_purged_http_mirror_is_downloaded_again_by_the_next_acquire(http_folder, tmp_path, monkeypatch):
    """The archive holds the document too, and the server answers 304 to the next acquire: a mirror that lost
    only the extracted file would be trusted without it. It is forgotten whole instead."""
    from foundry.data.acquire import acquire_source

    folder, url = http_folder
    members = {"doc00.txt": CLEAN, NAME: DOCUMENT}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    plant(folder / "corpus.tar.gz", buffer.getvalue())
    home = tmp_path / "home"
    monkeypatch.setenv("FOUNDRY_HOME", str(home))
    config = tiny(f"data.source={url}/corpus.tar.gz")
    first = acquire_source(config.data, tmp_path / "first.json")

    hits = purge_home.scan(home, needles(), prefect=False)
    assert [h.path.split("/", 3)[-1] for h in hits] == [f"extracted/{NAME}"]
    assert purge_home.scrub(home, needles(), hits) == {"source mirror": 1}
    assert holding(home, CANARY.encode()) == [] and purge_home.scan(home, needles(), prefect=False) == []

    again = acquire_source(config.data, tmp_path / "again.json")
    assert sorted(e.name for e in again.entries) == sorted(members) and again.digest == first.digest


def test_prefect_artifacts_that_cannot_be_read_fail_the_scan(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: f"http://127.0.0.1:{port}/api"}):  # read once, at import: not the env
        with pytest.raises(purge_home.PrefectUnreadable, match="purge refuses"):
            purge_home.scan(tmp_path, needles())


def test_a_text_file_loses_the_lines_a_needle_spans_and_keeps_the_others_byte_for_byte():
    text = f"keep one\r\n{DOCUMENT}keep \xff two\nthe quokka\nmarmalade\n"
    found = needles(r"quokka\s+marmalade")
    scrubbed, dropped = purge_artifacts.scrubbed(text, ".log", found)
    assert (scrubbed, dropped) == ("keep one\r\nkeep \xff two\n", 4)  # the regex's match runs over a line break
    assert purge_artifacts.scrubbed(scrubbed, ".log", found) == (scrubbed, 0)


def test_vacuum_leaves_no_old_row_in_a_sqlite_file_or_its_log(tmp_path):
    import sqlite3

    db = tmp_path / "prefect.db"
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("PRAGMA journal_mode = WAL")  # as Prefect opens it
    reader.execute("CREATE TABLE artifact (id INTEGER PRIMARY KEY, data TEXT)")
    reader.executemany("INSERT INTO artifact (data) VALUES (?)", [(f"row {i} {CLEAN}",) for i in range(50)])
    reader.execute("INSERT INTO artifact (data) VALUES (?)", (f"the {CANARY}",))
    reader.execute("UPDATE artifact SET data = '[purged]' WHERE data LIKE '%quokka%'")  # as update_artifact does
    assert holding(tmp_path, CANARY.encode())  # the old row is still in the file or its log
    purge_home.vacuum(db)
    assert holding(tmp_path, CANARY.encode()) == []
    assert reader.execute("SELECT count(*) FROM artifact").fetchone() == (51,)  # an open connection sees it all
    reader.close()


def test_a_ledger_is_rewritten_under_the_lock_its_workload_names_and_only_chat_keeps_one(tmp_path):
    """The alignment ledger's rows are renamed under the alignment lock, which a preparation extending the ledger
    holds too; a ledger no workload names is rewritten under none."""
    import fcntl

    from foundry.align import split_ledger
    from foundry.core import workload
    from foundry.purge import ledgers

    home = tmp_path / "home"
    assert [n for n in workload.REGISTERED if workload.named(n).home_ledgers(home)] == ["chat"]
    (ledger,) = workload.named("chat").home_ledgers(home)
    assert ledger.folder == split_ledger.store(home)

    def lock_is_free() -> bool:
        with open(split_ledger.store(home) / ".lock", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(handle, fcntl.LOCK_UN)
            return True

    with ledgers._lock(home, (split_ledger.store(home) / ("0" * 64) / "ledger.csv").resolve()):
        assert not lock_is_free()
    with ledgers._lock(home, (home / "ledgers" / "other" / "ledger.csv").resolve()):
        assert lock_is_free()
