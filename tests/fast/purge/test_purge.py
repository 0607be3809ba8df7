"""`foundry purge`, the dry run, against a real data version: a corpus with planted canary documents prepared,
committed to a real DVC workspace, cache and local remote, and hydrated; an embedded MLflow store of the test's
own (a SQLite file under tmp_path) with a version registered on that data, a child registered from it, a version
on data this machine does not hold, and artifacts holding a canary. No training, no server but a loopback one
that answers 503."""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import failing_mlflow_server, tracking_uri
from helpers_configs import tiny
from helpers_registry import register_tagged
from helpers_snapshots import Snapshot
from homes import seeded_mlflow_store
from synthetic import synthetic_docs

from foundry.cli import main
from foundry.core.contracts import DataVersion
from foundry.data.hydrate import HydrationError, hydrate_version
from foundry.purge import apply as purge_apply
from foundry.purge import record as purge_record
from foundry.purge import search
from foundry.runtime import tracking

CANARY = "quokka marmalade"


@dataclass
class Fleet:
    home: Path
    data: DataVersion
    canaries: dict[str, str]  # sha256 -> the source file it came from
    run_id: str = ""  # the run of the version trained on it

    @property
    def hydrated(self) -> Path:
        return self.home / "hydrated" / self.data.data_version


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


# `canary_home`'s build, once per test process: the modules that import it share it (read-only; each test
# works on a copy), as a session fixture imported into several modules would be built once per module.
_BUILT: dict[str, tuple[Path, DataVersion, dict[str, str], object]] = {}


@pytest.fixture(scope="module")
def canary_home(tmp_path_factory) -> tuple[Path, DataVersion, dict[str, str], object]:
    """A home holding one data version of word soup and six canaries, in its workspace, DVC cache, remote and a
    hydrated copy: (home, version, {canary sha256: source file}, config). Each test works on a copy of it."""
    if "home" not in _BUILT:
        _BUILT["home"] = build_canary_home(tmp_path_factory.mktemp("purge"))
    return _BUILT["home"]


def build_canary_home(root: Path) -> tuple[Path, DataVersion, dict[str, str], object]:
    from foundry.core.preparing import Preparing
    from foundry.data.acquire import acquire_source
    from foundry.data.hydrate import hydrate_version
    from foundry.data.versioning import version_dataset
    from foundry.pretrain.prepare import prepare

    source = root / "source"
    for i, text in enumerate(synthetic_docs(36, seed=3) + synthetic_docs(6, seed=11)):
        name = f"doc{i:02d}.txt" if i < 36 else f"secret/canary{i - 36}.txt"
        if i >= 36:  # the first canary also holds an e-mail address: the audit names it as an example
            words = text.split(" ")
            text = " ".join(words[:30] + [CANARY] + (["jane.doe@example.com"] if i == 36 else []) + words[30:])
            text = text.replace("the end", "the <|endoftext|> end") if i == 38 else text  # spans counted, not cut
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    config = tiny(f"data.source={source}")
    manifest = acquire_source(config.data, root / "source_manifest.json")
    prepare(Preparing(manifest, config, root / "prepared"))
    home = root / "home"
    data = version_dataset(config, root / "prepared", manifest, home)
    with open(hydrate_version(data, home) / "documents.csv", newline="") as fh:
        canaries = {r["sha256"]: r["source"] for r in csv.DictReader(fh) if r["source"].startswith("secret/")}
    assert len(canaries) == 6
    return home, data, canaries, config


# The registered fleet of `canary_home` (one per test process), by its home: kept here, not in a fixture of its
# own, so that a module importing `canary_home` and `fleet` needs no third name.
_REGISTERED: dict[Path, tuple[Fleet, Snapshot, Path]] = {}


def registered_fleet(canary_home, root: Path) -> tuple[Fleet, Snapshot, Path]:
    """`canary_home` copied once into a working home under `root`, with an embedded MLflow store (a SQLite file
    beside it) holding the three registered versions and the logged artifacts: (the fleet, a snapshot of its home,
    the store). Each test gets this state back at the same paths (`fleet`): registering anew per test cost seconds."""
    home, data, canaries, config = canary_home
    copy, database = root / "home", root / "mlflow.db"
    shutil.copytree(home, copy, symlinks=True)
    data = DataVersion(data_version=data.data_version, remote=str(copy / "dvc-remote"))
    from prefect.settings import PREFECT_HOME, temporary_settings

    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        temporary_settings({PREFECT_HOME: root / "prefect"}),
        tracking_uri(monkeypatch, seeded_mlflow_store(database)),
    ):
        monkeypatch.setenv("FOUNDRY_HOME", str(copy))
        tags = {"data_version": data.data_version, "data.remote": data.remote}
        run_id = register_tagged(config, "purge-canary", tags).run_id
        tracking.set_tags(run_id, tags)  # as the pipeline's hydrate step tags its run
        register_tagged(config, "purge-child", {"parent_model": "models:/purge-canary@champion"})
        register_tagged(config, "purge-other", {"data_version": "f" * 32, "data.remote": data.remote})
        fleet = Fleet(copy, data, canaries, run_id)
        for name in ("train.jsonl", "audit.json"):
            tracking.log_artifact(run_id, fleet.hydrated / name, "data")
        completions = ["river stone light", f"the {CANARY} garden"]
        tracking.client().log_table(run_id, {"prompt": ["a", "b"], "completion": completions}, "evaluation/gen.json")
    return fleet, Snapshot(root / "pristine", copy), database


@pytest.fixture()
def fleet(canary_home, tmp_path_factory, tmp_path, monkeypatch) -> Fleet:
    """A fresh, writable home of the test's own (FOUNDRY_HOME) with its MLflow store (the tracking URI): the
    process's `registered_fleet` put back in place, the store copied to a path of the test's own."""
    if canary_home[0] not in _REGISTERED:
        _REGISTERED[canary_home[0]] = registered_fleet(canary_home, tmp_path_factory.mktemp("fleet"))
    built, snapshot, database = _REGISTERED[canary_home[0]]
    snapshot.restore()
    shutil.copy(database, tmp_path / "mlflow.db")  # a new URI: no engine MLflow cached holds the old file open
    monkeypatch.setenv("FOUNDRY_HOME", str(built.home))
    monkeypatch.setenv("DVC_SITE_CACHE_DIR", str(tmp_path / "dvc-site-cache"))  # DVC keys its index by the path
    from prefect.settings import PREFECT_HOME, temporary_settings

    # A Prefect home of the test's own with no database: the purge reads no run page (nothing starts a server).
    with (
        temporary_settings({PREFECT_HOME: tmp_path / "prefect"}),
        tracking_uri(monkeypatch, f"sqlite:///{tmp_path / 'mlflow.db'}"),
    ):
        yield Fleet(built.home, built.data, dict(built.canaries), built.run_id)


def dry_run(fleet: Fleet, **criterion) -> search.PurgePlan:
    ((kind, value),) = criterion.items()
    return search.plan(fleet.home, search.Criterion(kind=kind, value=value), "a deletion request")


def lines_holding(path: Path, needle: str) -> list[int]:
    return [n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in json.loads(line)["text"]]


def test_the_dry_run_finds_every_copy_and_every_version_trained_on_it(fleet):
    before = digests(fleet.home)
    plan = dry_run(fleet, match=CANARY)
    assert set(plan.documents) == set(fleet.canaries)  # the six canaries and no other document
    (hit,) = plan.data_versions
    assert hit.data_version == fleet.data.data_version and set(hit.documents) == set(fleet.canaries)
    files = {f.file: f for f in hit.files}
    splits = {s for s in ("train", "holdout") if f"{s}.jsonl" in files}
    assert splits == {"train", "holdout"}  # the canaries fell on both sides of the split
    for split in splits:  # exactly the lines that hold a canary
        expected = [f"line {n}" for n in lines_holding(fleet.hydrated / f"{split}.jsonl", CANARY)]
        assert list(files[f"{split}.jsonl"].entries) == expected
    assert len(files["documents.csv"].entries) == len(files["ledger.csv"].entries) == 6
    assert len(files["ledger_minhash.npy"].entries) == 6
    assert files["audit.json"].entries == ("email example 1",)  # names the first canary; its excerpt is masked
    assert {c.place for c in hit.copies} == {
        "workspace cache",
        "hydration cache",
        "remote",
        "hydrated copy",
        "workspace",
    }
    assert {a.path.split("/artifacts/", 1)[1] for a in plan.artifacts} == {
        "data/train.jsonl",
        "data/audit.json",
        "evaluation/gen.json",
    }
    assert {m.model: m.why.split(" ")[0] for m in plan.models} == {
        "models:/purge-canary/1": "trained",
        "models:/purge-child/1": "built",  # from its parent, named by alias
    }
    assert plan.runs == (fleet.run_id,)
    assert [u.what for u in plan.unchecked] == [f"data version {'f' * 32}"]  # purge-other's: not on this machine
    assert digests(fleet.home) == before  # a dry run changes nothing


def test_each_token_span_decodes_to_a_canary(fleet):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(fleet.hydrated / "tokenizer.json"))
    (hit,) = dry_run(fleet, match=CANARY).data_versions
    pieces: dict[tuple[str, str], list[int]] = {}  # (split, line) -> its tokens, a span cut by a shard joined
    for found in sorted((f for f in hit.files if f.holds == "tokens"), key=lambda f: f.file):
        tokens = np.fromfile(fleet.hydrated / found.file, dtype="<u2")
        for entry in found.entries:
            line, start, end, verified = re.fullmatch(r"line (\d+): tokens (\d+)-(\d+) \((.*)\)", entry).groups()
            assert verified == "verified"
            pieces.setdefault((found.file.split("_")[0], line), []).extend(tokens[int(start) : int(end)].tolist())
    assert len(pieces) == 6
    for (split, line), ids in pieces.items():  # each span is its document exactly, no end-of-text in it
        text = json.loads((fleet.hydrated / f"{split}.jsonl").read_text().splitlines()[int(line) - 1])["text"]
        assert CANARY in text and tokenizer.decode(ids, skip_special_tokens=False) == text


def test_a_document_and_a_source_find_only_that_document(fleet):
    rows = (fleet.hydrated / "documents.csv").read_text().splitlines()[1:]
    plain = next(r.split(",")[0] for r in rows if r.split(",")[0] not in fleet.canaries)
    plan = dry_run(fleet, document=plain)
    assert plan.documents == (plain,) and [m.model for m in plan.models] == [
        "models:/purge-canary/1",
        "models:/purge-child/1",
    ]
    sha, name = sorted(fleet.canaries.items())[0]
    assert dry_run(fleet, source=name).documents == (sha,)
    nothing = dry_run(fleet, match="no such phrase anywhere")
    assert (nothing.documents, nothing.data_versions, nothing.artifacts, nothing.models) == ((), (), (), ())


def test_the_plan_printed_and_as_json_holds_no_text(fleet, capsys):
    config = ["--config", "configs/tiny.yaml"]
    assert main(["purge", "--match", CANARY, "--reason", "request 17", "--json", *config]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed)["counts"]["documents"] == 6 and CANARY not in printed
    assert main(["purge", "--match", CANARY, "--reason", "request 17", *config]) == 0
    printed = capsys.readouterr().out
    assert "models:/purge-child/1" in printed and "verified" in printed and CANARY not in printed


def holding(root: Path, needle: bytes) -> list[str]:
    """Every file under `root` whose bytes hold `needle`, SQLite files included, and every token shard (`*.bin`)
    whose tokens decode to text holding it (with the tokenizer of its own dataset folder or DVC cache)."""
    from tokenizers import Tokenizer

    found = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]
    for shard in root.rglob("*.bin"):
        tokenizer = shard.parent / "tokenizer.json"
        if tokenizer.is_file():
            ids = np.fromfile(shard, dtype="<u2").tolist()
            if needle.decode() in Tokenizer.from_file(str(tokenizer)).decode(ids, skip_special_tokens=False):
                found.append(f"{shard.relative_to(root)} (decoded)")
    return found


def apply(fleet: Fleet, keep_models: bool = False, **criterion):
    ((kind, value),) = criterion.items()
    return purge_apply.apply(
        fleet.home, search.Criterion(kind=kind, value=value), "request 17", keep_models=keep_models
    )


def without_the_unreadable_version(fleet: Fleet) -> None:
    """purge-other names a data version this machine holds no copy of: every --apply refuses while it is there."""
    tracking.client().delete_registered_model("purge-other")


def test_apply_refuses_while_a_place_is_unchecked_and_changes_nothing(fleet, capsys):
    before = digests(fleet.home)
    assert main(["purge", "--match", CANARY, "--reason", "request 17", "--apply"]) == 2
    assert f"data version {'f' * 32}" in capsys.readouterr().err
    assert digests(fleet.home) == before


def test_apply_removes_every_copy_and_keeps_every_other_document_in_its_split(fleet, capsys):
    without_the_unreadable_version(fleet)
    old = fleet.hydrated
    kept = {
        r["sha256"]: r["split"]
        for r in csv.DictReader(open(old / "documents.csv"))
        if r["sha256"] not in fleet.canaries
    }
    assert main(["purge", "--match", CANARY, "--reason", "request 17", "--apply"]) == 0
    printed = capsys.readouterr().out
    assert CANARY not in printed and "verified" in printed
    assert holding(fleet.home, CANARY.encode()) == []  # caches, remote, hydrated copy, workspace, artifacts
    (record_run,) = tracking.client().search_runs(
        [tracking.experiment_id(purge_record.EXPERIMENT)], filter_string="attributes.status = 'FINISHED'"
    )
    record = purge_record.PurgeRecord.model_validate_json(
        Path(tracking.client().download_artifacts(record_run.info.run_id, "purge_record.json")).read_text()
    )
    assert record.verified and set(record.documents) == set(fleet.canaries)
    new = record.replaced[fleet.data.data_version]
    copy = hydrate_version(DataVersion(data_version=new, remote=fleet.data.remote), fleet.home)
    assert {r["sha256"]: r["split"] for r in csv.DictReader(open(copy / "documents.csv"))} == kept
    with pytest.raises(HydrationError, match=record.record):
        hydrate_version(fleet.data, fleet.home)
    canary, child = (tracking.client().get_model_version(n, "1") for n in ("purge-canary", "purge-child"))
    assert canary.tags[purge_record.TAG] == child.tags[purge_record.TAG] == record.record
    assert "champion" not in canary.aliases + child.aliases  # both were champion
    assert tracking.client().get_run(fleet.run_id).data.tags[purge_record.TAG] == record.record


def test_the_same_purge_again_finds_nothing_and_records_nothing(fleet, capsys):
    without_the_unreadable_version(fleet)
    assert main(["purge", "--match", CANARY, "--reason", "request 17", "--apply"]) == 0
    capsys.readouterr()
    again = dry_run(fleet, match=CANARY)
    assert (again.documents, again.data_versions, again.artifacts, again.unchecked) == ((), (), (), ())
    assert main(["purge", "--match", CANARY, "--reason", "request 17", "--apply"]) == 0
    assert "nothing left to remove" in capsys.readouterr().out


def test_keep_models_keeps_champion(fleet):
    without_the_unreadable_version(fleet)
    record = apply(fleet, keep_models=True, match=CANARY)
    assert record.lost_champion == ()
    assert str(tracking.client().get_model_version_by_alias("purge-canary", "champion").version) == "1"


def test_a_purge_that_failed_half_way_finishes_when_run_again(fleet, monkeypatch):
    without_the_unreadable_version(fleet)

    def fail(*_args, **_kwargs):
        raise OSError("disk gone")

    with monkeypatch.context() as patch:
        patch.setattr(purge_apply.purge_home, "scrub", fail)  # after the data versions, before the registry
        with pytest.raises(OSError, match="disk gone"):
            apply(fleet, match=CANARY)
    assert holding(fleet.home / "mlflow", CANARY.encode()) != []  # the artifacts still hold it
    record = apply(fleet, match=CANARY)
    assert record is not None and record.verified
    assert holding(fleet.home, CANARY.encode()) == []
    assert tracking.client().get_model_version("purge-canary", "1").tags[purge_record.TAG] == record.record


def test_a_registry_that_cannot_be_read_refuses(fleet, monkeypatch):
    with failing_mlflow_server(monkeypatch, "MLFLOW_TRACKING_URI"):
        with pytest.raises(search.RegistryUnreadable, match="purge refuses"):
            dry_run(fleet, match=CANARY)


def test_a_bad_criterion_is_a_usage_error(home, capsys):
    assert main(["purge", "--document", "not-a-sha", "--reason", "r"]) == 2
    assert main(["purge", "--match", "(unclosed", "--reason", "r"]) == 2
    err = capsys.readouterr().err
    assert "64 lower-case hex digits" in err and "not a regular expression" in err


def test_a_generated_sample_repeating_a_document_is_found_by_match_not_by_document(fleet):
    """#55 point 6, as docs/fleet.md says: `--document` finds the document and what names it; a completion that
    repeats part of its text (evaluation/gen.json) is found only by `--match` with a phrase of it."""
    sha = next(iter(fleet.canaries))
    by_document = {a.path.split("/artifacts/", 1)[1] for a in dry_run(fleet, document=sha).artifacts}
    by_match = {a.path.split("/artifacts/", 1)[1] for a in dry_run(fleet, match=CANARY).artifacts}
    assert "evaluation/gen.json" not in by_document and "evaluation/gen.json" in by_match
