"""`foundry purge --apply`, step 4: a prepared data version rewritten without the purged documents, against real
prepared datasets (word soup with six canaries on both sides of the split, one of them encoding end-of-text in its
own text; chat records with canary replies). The input is made read-only, as DVC leaves its cache objects."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers_configs import tiny
from helpers_tokenizers import tiny_tokenizer
from synthetic import synthetic_docs

from foundry.data.hydrate import verify_dataset
from foundry.data.ledger import LEDGER, SIGNATURES
from foundry.data.manifest import DatasetManifest
from foundry.pretrain.shards import load_split
from foundry.purge import data as purge_data
from foundry.purge import rewrite as purge_rewrite
from foundry.purge.plan import Criterion, DataHit
from models.tokens import EOT

CANARY = "quokka marmalade"


def read_only(folder: Path) -> Path:
    for path in folder.iterdir():
        path.chmod(0o444)
    return folder


@pytest.fixture(scope="module")
def documents_version(tmp_path_factory) -> Path:
    """36 documents of word soup and 6 canaries (from `secret/`): the first holds an e-mail address, so the audit
    names it; the third encodes end-of-text in its own text."""
    from foundry.core.preparing import Preparing
    from foundry.data.acquire import acquire_source
    from foundry.pretrain.prepare import prepare

    root = tmp_path_factory.mktemp("rewrite")
    source = root / "source"
    for i, text in enumerate(synthetic_docs(36, seed=3) + synthetic_docs(6, seed=11)):
        name = f"doc{i:02d}.txt" if i < 36 else f"secret/canary{i - 36}.txt"
        if i >= 36:
            words = text.split(" ")
            text = " ".join(words[:30] + [CANARY] + (["jane.doe@example.com"] if i == 36 else []) + words[30:])
            text = text.replace("the end", "the <|endoftext|> end") if i == 38 else text
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text)
    config = tiny(f"data.source={source}")
    prepare(Preparing(acquire_source(config.data, root / "source.json"), config, root / "prepared"))
    return read_only(root / "prepared")


@pytest.fixture(scope="module")
def chat_version(tmp_path_factory) -> Path:
    """40 SFT records; every fifth reply holds the canary."""
    from foundry.align.prepare import prepare_aligned
    from foundry.config import load_config
    from foundry.data.acquire import acquire_source

    root = tmp_path_factory.mktemp("rewrite-chat")
    (root / "src").mkdir()
    records = [
        {"prompt": f"Add: {n} + 1", "response": f"{n + 1}" + (f", said the {CANARY}" if n % 5 == 0 else "")}
        for n in range(40)
    ]
    (root / "src" / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    tiny_tokenizer(root / "tokenizer.json")
    settings = [f"data.source={root / 'src'}", "align.method=sft", f"tokenizer.from_file={root / 'tokenizer.json'}"]
    config = load_config(None, [*settings, "model.block_size=96", "data.holdout_fraction=0.3"])
    prepare_aligned(acquire_source(config.data, root / "source.json"), config, root / "prepared")
    return read_only(root / "prepared")


def version_files(folder: Path) -> purge_data.VersionFiles:
    listing = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    return purge_data.VersionFiles(listing, lambda name: folder / name)


def purge(folder: Path, out: Path, **criterion) -> tuple[purge_rewrite.Rewritten | None, set[str]]:
    """What `apply` gives the rewrite: the plan's hit for this version, the documents' sha256s and ledger names."""
    ((kind, value),) = criterion.items()
    chosen, files = Criterion(kind=kind, value=value), version_files(folder)
    matched = purge_data.matching(files, chosen)
    shas = {d.sha256 for d in matched.documents} | purge_data.listed_shas(files, chosen)
    names = purge_data.ledger_names(files, chosen, shas)
    hit = DataHit(
        data_version="0" * 32,
        kind=files.manifest().kind,
        documents=tuple(sorted(d.sha256 for d in matched.documents)),
        listed=(),
        files=tuple(purge_data.locations(files, chosen, matched, shas, names)),
        copies=(),
    )
    return purge_rewrite.rewrite(files, hit, shas, names, out), shas


def split_lines(folder: Path, table: str = "documents.csv") -> dict[str, list[tuple[str, bytes]]]:
    """{split: [(sha256, its line's bytes)]}, in order."""
    with open(folder / table, newline="") as fh:
        rows = list(csv.DictReader(fh))
    found = {}
    for split in ("train", "holdout"):
        shas = [r["sha256"] for r in rows if r["split"] == split]
        lines = (folder / f"{split}.jsonl").read_bytes().splitlines(keepends=True)
        assert len(shas) == len(lines)
        found[split] = list(zip(shas, lines))
    return found


def without(lines: dict[str, list[tuple[str, bytes]]], shas: set[str]) -> dict[str, list[tuple[str, bytes]]]:
    return {split: [(sha, line) for sha, line in kept if sha not in shas] for split, kept in lines.items()}


def ledger(folder: Path) -> list[tuple[list[str], list[int]]]:
    """(ledger row, its signature) pairs."""
    with open(folder / LEDGER, newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    return list(zip(rows, np.load(folder / SIGNATURES).tolist(), strict=True))


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def assert_valid(out: Path, expected: dict[str, list[tuple[str, bytes]]]) -> None:
    """The folder verifies and loads as a dataset, and each split's tokens decode to exactly its documents."""
    from tokenizers import Tokenizer

    assert verify_dataset(out) == []
    manifest = DatasetManifest.read(out)
    assert split_lines(out) == expected
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    for split, kept in expected.items():
        tokens = np.asarray(load_split(out, split))
        assert len(tokens) == manifest.tokens(split) == sum(s.tokens for s in manifest.shards_of(split))
        texts = "".join(json.loads(line)["text"] + EOT for _, line in kept)
        decoded = tokenizer.decode(tokens.tolist(), skip_special_tokens=False)
        assert decoded == texts and (CANARY in decoded) == any(CANARY.encode() in line for _, line in kept)
        assert manifest.count(f"{split}_docs") == len(kept)
        assert manifest.count(f"{split}_bytes") == sum(len(json.loads(line)["text"].encode()) for _, line in kept)


def test_canaries_on_both_splits_leave_every_file_and_nothing_else_moves(documents_version, tmp_path):
    before = digests(documents_version)
    result, shas = purge(documents_version, tmp_path / "out", match=CANARY)
    assert len(shas) == 6 and result is not None and result.folder == tmp_path / "out"
    assert result.removed["documents"] == 6 and result.removed["ledger rows"] == result.removed["signatures"] == 6
    assert result.removed["train documents"] and result.removed["holdout documents"]  # both splits lost some
    assert result.removed["audit examples"] == 1  # the e-mail example names the first canary
    expected = without(split_lines(documents_version), shas)
    assert_valid(result.folder, expected)
    for path in result.folder.iterdir():  # neither the text nor the source names, anywhere
        if path.name != "tokenizer.json":
            assert b"quokka" not in path.read_bytes() and b"secret/" not in path.read_bytes(), path.name
    # The tokenizer stays as it was (every kept token id depends on it), with what it learned from the canaries:
    # here "Ġquokka" and "Ġmarmalade" are in its vocabulary.
    assert (result.folder / "tokenizer.json").read_bytes() == (documents_version / "tokenizer.json").read_bytes()
    old, new = ledger(documents_version), ledger(result.folder)
    assert new == [(row, signature) for row, signature in old if row[0] not in shas]  # still row for row
    manifest, was = DatasetManifest.read(result.folder), DatasetManifest.read(documents_version)
    assert manifest.ledger.documents == len(new) == len(old) - 6
    assert (manifest.count("docs_out"), manifest.count("purged")) == (was.count("docs_out") - 6, 6)
    assert manifest.count("docs_in") == was.count("docs_in")
    assert json.loads((result.folder / "audit.json").read_text())["docs_out"] == was.count("docs_out") - 6
    assert digests(documents_version) == before  # the input is only read


def test_a_document_in_a_split_with_one_that_encodes_end_of_text_is_cut_exactly(documents_version, tmp_path):
    lines = split_lines(documents_version)
    split = next(s for s, kept in lines.items() if any(b"<|endoftext|>" in line for _, line in kept))
    at = next(i for i, (_, line) in enumerate(lines[split]) if b"<|endoftext|>" in line)
    plain = next(sha for sha, line in lines[split][:at] if b"quokka" not in line)  # the spans after it shift
    result, shas = purge(documents_version, tmp_path / "out", document=plain)
    assert shas == {plain} and result.removed["documents"] == 1 and result.removed["audit examples"] == 0
    assert_valid(result.folder, without(lines, {plain}))  # the canary with end-of-text kept, byte for byte
    other = next(s for s in lines if s != split)
    shards = DatasetManifest.read(result.folder).shards_of(other)
    assert shards == DatasetManifest.read(documents_version).shards_of(other)  # the other split untouched
    assert all((result.folder / s.file).read_bytes() == (documents_version / s.file).read_bytes() for s in shards)
    assert (result.folder / "audit.md").read_bytes() != (documents_version / "audit.md").read_bytes()  # kept count


def test_a_split_left_empty_or_files_that_disagree_give_none_and_write_nothing(documents_version, tmp_path):
    holdout = {sha for sha, _ in split_lines(documents_version)["holdout"]}
    hit = DataHit(data_version="0" * 32, kind="text", documents=(), listed=(), files=(), copies=())
    empty = tmp_path / "empty"
    assert purge_rewrite.rewrite(version_files(documents_version), hit, holdout, set(), empty) is None
    broken = shutil.copytree(documents_version, tmp_path / "broken")
    (broken / SIGNATURES).chmod(0o644)
    np.save(broken / SIGNATURES, np.load(broken / SIGNATURES)[:-1])  # one ledger row without its signature
    assert purge(broken, tmp_path / "unsigned", match=CANARY)[0] is None
    (broken / "train.jsonl").chmod(0o644)
    with open(broken / "train.jsonl", "ab") as fh:  # one line more than the table has rows
        fh.write((broken / "train.jsonl").read_bytes().splitlines(keepends=True)[0])
    assert purge_rewrite.rewrite(version_files(broken), hit, holdout, set(), tmp_path / "lines") is None
    assert [list((tmp_path / name).iterdir()) for name in ("empty", "unsigned", "lines")] == [[], [], []]


def test_chat_records_leave_the_ragged_arrays_row_for_row(chat_version, tmp_path):
    from foundry.align.records import load_conversations

    result, shas = purge(chat_version, tmp_path / "out", match=CANARY)
    assert result is not None and result.removed["documents"] == len(shas) == 8
    assert result.removed["train documents"] and result.removed["holdout documents"]
    assert verify_dataset(result.folder) == []
    before, after = split_lines(chat_version, "records.csv"), split_lines(result.folder, "records.csv")
    assert after == without(before, shas)
    manifest, was = DatasetManifest.read(result.folder), DatasetManifest.read(chat_version)
    for split, kept in before.items():
        old, new = load_conversations(chat_version, split), load_conversations(result.folder, split)
        rows = [i for i, (sha, _) in enumerate(kept) if sha not in shas]
        assert len(new.tokens) == len(new.trained) == manifest.count(f"{split}_records") == len(rows)
        for j, i in enumerate(rows):
            assert np.array_equal(new.tokens[j], old.tokens[i]) and np.array_equal(new.trained[j], old.trained[i])
        assert manifest.tokens(split) == int(new.tokens.lengths().sum())
    assert (manifest.count("records_out"), manifest.count("purged")) == (was.count("records_out") - 8, 8)
    for path in result.folder.iterdir():
        assert b"quokka" not in path.read_bytes(), path.name
