"""What `foundry purge --apply` leaves behind for later runs: the alignment prepare drops the chat and preference
records a purge removed (by the sha256 the purge recorded), the promotion gate scores a champion kept serving
(`--keep-models`) on the version its purged data was rewritten into and refuses, naming the record, when nothing
replaced it, and the record names a regex or a path only by a keyed hash. Real DVC remote, embedded MLflow of the
test's own (SQLite under tmp_path), random-weight models; no server, no training."""

# ruff: noqa: F811  (the fixtures imported from test_purge are test arguments here)

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest
import torch
from conftest import tracking_uri
from homes import seeded_mlflow_store
from test_purge import (  # noqa: F401  (fixtures: `fleet` and those it is built from)
    CANARY,
    apply,
    canary_home,
    dry_run,
    fleet,
    registered_fleet,
    without_the_unreadable_version,
)

from foundry.align.prepare import align_dataset_key, prepare_aligned
from foundry.config import load_config
from foundry.core.contracts import Candidate, DataVersion, RunContext
from foundry.core.metrics.holdout import HoldoutMetrics
from foundry.data import purged
from foundry.data.acquire import acquire_source
from foundry.purge import data as purge_data
from foundry.purge import record as purge_record
from foundry.purge.data import VersionFiles
from foundry.purge.plan import Criterion
from foundry.registry import gate, versions
from foundry.runtime import tracking
from foundry.serving.package import log_model
from models.gpt import GPT, GPTConfig

RECORD = "purge-20260101T000000-0123abcd"
PURGED = "5" * 32  # a champion's data version a purge removed: never hydrated, only followed

# --- 1. the alignment prepare drops what a purge removed ------------------------------------------------------

CHATS = [
    {"prompt": "Mail jane.doe@example.com the quokka sum: 2 + 2", "response": "4"},
    {"prompt": "Add: 1 + 1", "response": "2"},
    {"prompt": "Add: 1 + 3", "response": "4"},
    {"prompt": "Add: 2 + 5", "response": "7"},
    {"prompt": "Add: 3 + 3", "response": "6"},
]


def align_config(source, tokenizer):
    overrides = [
        f"data.source={source}",
        "align.method=sft",
        f"tokenizer.from_file={tokenizer}",
        "model.block_size=48",
        "data.holdout_fraction=0.3",
    ]
    return load_config(None, overrides)


def prepared_records(out) -> dict[str, str]:
    """{sha256: split} as the version's `records.csv` lists them (what a purge finds and records)."""
    import csv

    with open(out / "records.csv", newline="") as fh:
        return {row["sha256"]: row["split"] for row in csv.DictReader(fh)}


def test_the_align_prepare_drops_a_record_a_purge_removed_and_counts_it(chat_tokenizer, tmp_path):
    source, home = tmp_path / "src", tmp_path / "home"
    source.mkdir()
    (source / "chats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CHATS))
    config = align_config(source, chat_tokenizer)
    manifest = acquire_source(config.data, tmp_path / "source_manifest.json")
    first = prepare_aligned(manifest, config, tmp_path / "first")
    # The purge's own search, on the version's files: the sha256 it would record for the matched record.
    files = VersionFiles({}, lambda name: tmp_path / "first" / name)
    (found,) = purge_data.matching(files, Criterion(kind="match", value="quokka")).documents
    assert found.sha256 in prepared_records(tmp_path / "first")
    purged.record_documents(home, RECORD, {found.sha256})

    again = prepare_aligned(manifest, config, tmp_path / "again", purged=frozenset(purged.purged_documents(home)))
    assert set(prepared_records(tmp_path / "again")) == set(prepared_records(tmp_path / "first")) - {found.sha256}
    assert again.stats["dropped_purged"] == 1 and again.stats["records_out"] == first.stats["records_out"] - 1
    assert "pii_email_spans" in first.stats and "pii_email_spans" not in again.stats  # its PII: never counted
    kept = "".join((tmp_path / "again" / f).read_text() for f in ("train.jsonl", "holdout.jsonl", "audit.json"))
    assert "quokka" not in kept and "chats.jsonl:1" not in kept  # neither its text nor its name


def test_the_align_dataset_key_changes_with_the_purged_records_only_when_there_are_some(chat_tokenizer, tmp_path):
    config = align_config(tmp_path, chat_tokenizer)
    plain = align_dataset_key(config, "a" * 64, "ledger")
    assert align_dataset_key(config, "a" * 64, "ledger", frozenset()) == plain  # keys made before purges
    assert align_dataset_key(config, "a" * 64, "ledger", frozenset({"b" * 64})) != plain


# --- 2. the gate and a champion kept serving after its data was purged ---------------------------------------


@pytest.fixture()
def own_registry(versioned, tmp_path, monkeypatch):
    """The tiny dataset as a real data version in its home's DVC remote (the replacement a purge committed),
    that home as $FOUNDRY_HOME, and an embedded MLflow store of the test's own."""
    data, home = versioned
    monkeypatch.setenv("FOUNDRY_HOME", str(home))
    with tracking_uri(monkeypatch, seeded_mlflow_store(tmp_path / "mlflow.db")):
        yield data, home


def random_model(tokenizer, path):
    from tokenizers import Tokenizer

    torch.manual_seed(0)
    config = GPTConfig(vocab_size=Tokenizer.from_file(str(tokenizer)).get_vocab_size(), block_size=32, n_layer=1)
    model = GPT(GPTConfig(**{**config.to_dict(), "n_head": 2, "n_embd": 16}))
    torch.save({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, path)
    return path


def kept_champion(config, name: str, remote: str, tokenizer, tmp_path) -> str:
    """A champion of `name` trained (its tags say) on `PURGED`, a version a purge removed; its files are real."""
    run_id = tracking.start_pipeline_run(config, run_name=f"kept-{name}")
    (tmp_path / "champion").mkdir()
    uri = log_model(run_id, random_model(tokenizer, tmp_path / "champion" / "model.pt"), tokenizer)  # its name
    tags = {"data_version": PURGED, "data.remote": remote}
    return versions.publish(uri, name, run_id, tags, True, "kept serving by --keep-models").version


def judged(config, name: str, home, tiny_dataset, built_on: str | None):
    config = config.model_copy(update={"registry": config.registry.model_copy(update={"model_name": name})})
    candidate = Candidate(
        checkpoint=random_model(tiny_dataset / "tokenizer.json", home / "challenger.pt"),
        data=DataVersion(data_version="2" * 32, remote="r"),  # this run's data, built on the replacement's ledger
        data_dir=tiny_dataset,
        metrics=HoldoutMetrics.from_mlflow({"holdout/bits_per_byte": 1.0}),
        run=RunContext(run_id="gate-test", dir=home, home=home),
    )
    return gate.decide(config, candidate, built_on)


def test_the_gate_scores_a_kept_champion_on_the_replacement_of_its_purged_data(
    tiny_config, tiny_dataset, own_registry, tmp_path
):
    replacement, home = own_registry
    tokenizer = tiny_dataset / "tokenizer.json"
    kept_champion(tiny_config, "kept-replaced", replacement.remote, tokenizer, tmp_path)
    purge = purged.PurgeMark(data_version=PURGED, record=RECORD, replaced_by=replacement.data_version, when="now")
    purged.mark(home, purge)

    decision = judged(tiny_config, "kept-replaced", home, tiny_dataset, built_on=replacement.data_version)
    assert "footing" not in decision.checks  # the run built on the replacement: a fair comparison
    old = decision.inputs.old_holdout
    assert (old.data_version, old.replaces, old.purge_record) == (replacement.data_version, PURGED, RECORD)
    assert (home / "hydrated" / replacement.data_version).is_dir()  # both were scored on the replacement
    assert f"purge record {RECORD}" in decision.verdict and replacement.data_version[:12] in decision.verdict
    assert decision.tags()["gate.old_holdout_purge"] == RECORD


@pytest.mark.parametrize("built_on", [None, PURGED])
def test_the_gate_refuses_a_kept_champion_whose_data_a_purge_deleted_naming_the_record(
    tiny_config, tiny_dataset, own_registry, tmp_path, built_on
):
    data, home = own_registry
    name = f"kept-deleted-{built_on is None}".lower()
    kept_champion(tiny_config, name, data.remote, tiny_dataset / "tokenizer.json", tmp_path)
    purged.mark(home, purged.PurgeMark(data_version=PURGED, record=RECORD, replaced_by=None, when="now"))

    decision = judged(tiny_config, name, home, tiny_dataset, built_on=built_on)
    assert not decision.passed and not decision.make_champion and decision.inputs.old_holdout is None
    assert f"purge record {RECORD}; nothing replaced it" in decision.verdict


# --- 3. the criterion by a keyed hash -------------------------------------------------------------------------


def plain_hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def test_a_criterion_is_labelled_by_a_keyed_hash_under_a_key_of_the_home(tmp_path):
    one, other = tmp_path / "one", tmp_path / "other"
    criterion = Criterion(kind="source", value="secret/jane-doe.txt")
    hidden = purge_record.criterion_label(one, criterion, create=False)  # a dry run makes no key
    assert not (one / purge_record.KEY_FILE).exists() and criterion.value not in hidden
    label = purge_record.criterion_label(one, criterion)
    key = one / purge_record.KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    assert label.startswith("source hmac-sha256:") and plain_hash(criterion.value) not in label
    assert purge_record.criterion_label(one, criterion) == label  # the same purge, recognised
    assert purge_record.criterion_label(other, criterion) != label  # another home: another key
    os.chmod(key, 0o644)
    assert purge_record.criterion_label(one, criterion) == label and stat.S_IMODE(key.stat().st_mode) == 0o600


def test_the_purge_record_says_its_criterion_is_keyed_and_a_rerun_is_the_same_criterion(fleet):
    without_the_unreadable_version(fleet)
    record = apply(fleet, match=CANARY)
    assert record is not None and record.criterion_hash == purge_record.KEYED
    assert record.criterion.startswith("match hmac-sha256:") and plain_hash(CANARY) not in record.model_dump_json()
    assert dry_run(fleet, match=CANARY).criterion == record.criterion


# --- 4. the alignment split ledger under $FOUNDRY_HOME/ledgers/ names sources too ---------------------------------


def test_a_source_purge_renames_the_alignment_ledger_rows_naming_it_and_keeps_every_split(fleet):
    from foundry.align import split_ledger

    without_the_unreadable_version(fleet)
    source, other = sorted(fleet.canaries.values())[:2]
    rows = [("a" * 64, "train", f"{source}:3"), ("b" * 64, "holdout", source), ("c" * 64, "train", f"{other}:1")]
    with split_ledger.locked(fleet.home):
        split_ledger.extend(fleet.home, rows, fleet.data.data_version)  # `<version>:<file>:<line>` names
    before = split_ledger.read(split_ledger.head(fleet.home))
    ledger = split_ledger.head(fleet.home) / "ledger.csv"
    (hit,) = [h for h in dry_run(fleet, source=source).elsewhere if h.place == "split ledger"]
    assert (hit.where, hit.strings) == (ledger.relative_to(fleet.home).as_posix(), 2)

    record = apply(fleet, source=source)
    assert record.verified and record.removed["split ledger"] == 1
    after = split_ledger.read(split_ledger.head(fleet.home))
    assert after.split_of == before.split_of  # every prompt keeps its split
    version = fleet.data.data_version
    assert after.names == [f"{version}:[purged]", f"{version}:[purged]", f"{version}:{other}:1"]
    assert not any(source.encode() in p.read_bytes() for p in (fleet.home / "ledgers").rglob("*") if p.is_file())


def test_a_match_finds_and_renames_the_alignment_ledger_row_of_the_record_it_matched(chat_tokenizer, tmp_path):
    from foundry.align import split_ledger
    from foundry.purge import artifacts, search
    from foundry.purge import home as purge_home

    source, home, version = tmp_path / "src", tmp_path / "home", "9" * 32
    source.mkdir()
    (source / "chats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CHATS))
    config = align_config(source, chat_tokenizer)
    prepare_aligned(acquire_source(config.data, tmp_path / "source_manifest.json"), config, tmp_path / "v")
    with split_ledger.locked(home):
        split_ledger.extend(home, split_ledger.kept_records(tmp_path / "v"), version)
    files = VersionFiles({}, lambda name: tmp_path / "v" / name)  # an align version: no ledger of its own
    criterion = Criterion(kind="match", value="quokka")
    names = search._unledgered_names({version: files}, {version: purge_data.matching(files, criterion)})
    assert names == {"chats.jsonl:1"}  # the record's name, as the home's ledger gives it after its version
    needles = artifacts.Needles(criterion, {}, names)
    (hit,) = purge_home.scan(home, needles, prefect=False)
    assert (hit.place, hit.strings) == ("split ledger", 1)
    assert purge_home.scrub(home, needles, [hit]) == {"split ledger": 1}
    after = split_ledger.read(split_ledger.head(home)).names
    assert f"{version}:[purged]" in after and f"{version}:chats.jsonl:2" in after and len(after) == len(CHATS)
    assert purge_home.scan(home, needles, prefect=False) == []


def test_the_data_stages_drop_lines_name_the_rule_never_a_document(caplog):
    """The drop lines go to the run page's log, which no purge can rewrite: a rule once, no name, no detail."""
    import logging

    from foundry.data.audit import Audit

    audit = Audit()
    with caplog.at_level(logging.INFO, logger="foundry.data.audit"):
        for n in range(5):
            audit.removed("near_duplicate", f"secret/patient-{n}.txt", "repeats secret/patient-0.txt")
    lines = [record.getMessage() for record in caplog.records]
    assert lines == ["dropped documents: near_duplicate (the first 3 named in audit.json)"]
    assert audit.rules["near_duplicate"].documents == 5 and len(audit.rules["near_duplicate"].examples) == 3
