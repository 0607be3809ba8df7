"""Alignment data: the three record shapes, bad records in each (skipped by reason, or failing with file and
line), personal data scrubbed, the source left untouched, and the Great Expectations gate over the result."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from foundry.align.instructions import TASKS, instances, plausible_wrong, write_instruction_set
from foundry.align.prepare import prepare_aligned
from foundry.align.records import load_conversations, load_pairs
from foundry.align.validate import validate_aligned
from foundry.config import load_config
from foundry.data.acquire import acquire_source
from foundry.data.formats import BadInputError
from foundry.data.manifest import DatasetManifest
from foundry.data.validate import ValidationFailed
from models.chat import ChatTemplate

GOOD = {
    "chat": [
        {"messages": [{"role": "user", "content": "Add: 1 + 2"}, {"role": "assistant", "content": "3"}]},
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Add: 2 + 2"},
                {"role": "assistant", "content": "4"},
                {"role": "user", "content": "Add: 4 + 4"},
                {"role": "assistant", "content": "8"},
            ]
        },
        {"prompt": "Add: 3 + 3", "response": "6"},
        {"system": "Be brief.", "prompt": "Add: 5 + 1", "response": "6"},
    ],
    "preference": [
        {"prompt": "Add: 1 + 2", "chosen": "3", "rejected": "4"},
        {"prompt": "Add: 2 + 5", "chosen": "7", "rejected": "8"},
        {"system": "Be brief.", "prompt": "Add: 3 + 3", "chosen": "6", "rejected": "5"},
    ],
}
# Bad records of each shape and the reason each is dropped for.
BAD = {
    "chat": [
        ('{"messages": [{"role": "user", "content": "hi"}', "malformed_jsonl"),
        ("[1, 2]", "malformed_jsonl"),
        ('{"text": "hello"}', "unknown_shape"),
        ('{"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]}', "invalid_role"),
        ('{"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]}', "invalid_role"),
        ('{"messages": [{"role": "user", "content": "only a question"}]}', "no_assistant_turn"),
        ('{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "  "}]}', "empty_content"),
        ('{"messages": "not a list"}', "malformed_record"),
        ('{"prompt": "Add: 1 + 2", "response": ""}', "empty_content"),
        ('{"prompt": "x<|end|><|assistant|>y", "response": "z"}', "marker_in_content"),
        ('{"prompt": "' + "word " * 200 + '", "response": "long"}', "too_long_for_context"),
        ('{"prompt": "a", "chosen": "b", "rejected": "c"}', "wrong_shape"),
        ('{"prompt": "Add: 1 + 2", "response": "3", "extra": 1}', "unknown_shape"),
        ('{"messages": ' + "[" * 200_000 + "}", "malformed_jsonl"),  # past json's stack: RecursionError (#55)
        ('{"messages": ' + "[" * 950 + "]" * 950 + "}", "malformed_jsonl"),  # json's, then past the scrubber's
    ],
    "preference": [
        ('{"prompt": "Add: 1 + 1", "chosen": "2", "rejected": "2"}', "identical_pair"),
        ('{"prompt": "Add: 1 + 1", "chosen": "", "rejected": "3"}', "empty_content"),
        ('{"prompt": 7, "chosen": "2", "rejected": "3"}', "malformed_record"),
        ('{"prompt": "Add: 1 + 2", "response": "3"}', "wrong_shape"),
        ('{"prompt": "' + "word " * 200 + '", "chosen": "a", "rejected": "b"}', "too_long_for_context"),
    ],
}
METHOD = {"chat": "sft", "preference": "dpo"}


def config_for(source: Path, kind: str, tokenizer: Path, *extra: str):
    return load_config(
        None,
        [
            f"data.source={source}",
            f"align.method={METHOD[kind]}",
            f"tokenizer.from_file={tokenizer}",
            "model.block_size=48",
            "data.holdout_fraction=0.3",
            *extra,
        ],
    )


def write_source(folder: Path, kind: str, bad: bool) -> Path:
    folder.mkdir(parents=True)
    lines = [json.dumps(r) for r in GOOD[kind]]
    if bad:
        lines += [line for line, _ in BAD[kind]]
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n\n")
    (folder / "notes.txt").write_text("not records\n")
    return folder


def prepare(source: Path, kind: str, tokenizer: Path, out: Path, *extra: str) -> DatasetManifest:
    config = config_for(source, kind, tokenizer, "data.extensions=[.jsonl, .txt]", *extra)
    return prepare_aligned(acquire_source(config.data, out.parent / "source_manifest.json"), config, out)


@pytest.mark.parametrize("kind", ["chat", "preference"])
def test_good_records_of_every_shape_become_arrays_and_pass_the_gate(kind, chat_tokenizer, tmp_path):
    source = write_source(tmp_path / "src", kind, bad=False)
    out = tmp_path / "prepared"
    manifest = prepare(source, kind, chat_tokenizer, out)
    assert manifest.kind == kind and manifest.stats["records_out"] == len(GOOD[kind])
    assert manifest.stats["train_records"] >= 1 and manifest.stats["holdout_records"] >= 1
    assert manifest.chat_template == ChatTemplate().to_dict()
    if kind == "chat":
        data = load_conversations(out, "train")
        assert all(int(data.trained[i].sum()) >= 2 for i in range(len(data.tokens)))  # a reply and its end marker
    else:
        pairs = load_pairs(out, "train")
        assert len(pairs.prompt) == len(pairs.chosen) == len(pairs.rejected) == manifest.stats["train_records"]
    report = validate_aligned(out, config_for(source, kind, chat_tokenizer), tmp_path / "report.json")
    assert report.success and set(report.suites) == {"records", "arrays"}


@pytest.mark.parametrize("kind", ["chat", "preference"])
def test_bad_records_are_skipped_and_counted_by_reason(kind, chat_tokenizer, tmp_path):
    source = write_source(tmp_path / "src", kind, bad=True)
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    manifest = prepare(source, kind, chat_tokenizer, tmp_path / "prepared")
    expected: dict[str, int] = {"not_jsonl": 1}
    for _, reason in BAD[kind]:
        expected[reason] = expected.get(reason, 0) + 1
    dropped = {k.removeprefix("dropped_"): v for k, v in manifest.stats.items() if k.startswith("dropped_")}
    assert dropped == expected
    assert manifest.stats["records_out"] == len(GOOD[kind])
    audit = json.loads((tmp_path / "prepared" / "audit.json").read_text())
    assert audit["rules"]["too_long_for_context"]["examples"][0]["document"].startswith("records.jsonl:")
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before  # the source is only ever read


@pytest.mark.parametrize(
    ("kind", "index"), [("chat", 3), ("chat", 5), ("chat", 13), ("chat", 14), ("preference", 0), ("preference", 2)]
)
def test_on_error_fail_names_file_line_and_reason(kind, index, chat_tokenizer, tmp_path):
    line, reason = BAD[kind][index]
    source = tmp_path / "src"
    source.mkdir()
    (source / "records.jsonl").write_text(json.dumps(GOOD[kind][0]) + "\n" + line + "\n")
    with pytest.raises(BadInputError, match=f"records.jsonl:2: {reason.replace('_', ' ')}"):
        prepare(source, kind, chat_tokenizer, tmp_path / "prepared", "data.on_error=fail")


def test_personal_data_is_scrubbed_and_duplicates_go(chat_tokenizer, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    records = [
        {"prompt": "Mail jane.doe@example.com the sum: 2 + 2", "response": "4"},
        {"prompt": "Add: 1 + 1", "response": "2"},
        {"prompt": "Add: 1 + 1", "response": "2"},
        {"prompt": "Add: 1 + 3", "response": "4"},
    ]
    (source / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "prepared"
    manifest = prepare(source, "chat", chat_tokenizer, out)
    assert manifest.stats["pii_email_spans"] == 1 and manifest.stats["dropped_exact_duplicate"] == 1
    kept = (out / "train.jsonl").read_text() + (out / "holdout.jsonl").read_text()
    assert "jane.doe" not in kept and "<EMAIL>" in kept


@pytest.fixture()
def prepared_chat(chat_tokenizer, tmp_path) -> tuple[Path, object]:
    source = write_source(tmp_path / "src", "chat", bad=False)
    out = tmp_path / "prepared"
    prepare(source, "chat", chat_tokenizer, out)
    return out, config_for(source, "chat", chat_tokenizer)


def _edit_first_record(folder: Path, edit) -> None:
    path = folder / "train.jsonl"
    lines = path.read_text().splitlines()
    lines[0] = json.dumps(edit(json.loads(lines[0])), ensure_ascii=False, sort_keys=True)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("damage", "failed"),
    [
        (lambda r: {"messages": [m for m in r["messages"] if m["role"] != "assistant"]}, "assistant_turns"),
        (lambda r: {"messages": [{**m, "role": "robot"} for m in r["messages"]]}, "roles_valid"),
        (
            lambda r: {"messages": [{**m, "content": "contact jane.doe@example.com"} for m in r["messages"]]},
            "pii_found",
        ),
        (lambda r: {"messages": [{**m, "content": "word " * 60} for m in r["messages"]]}, "tokens"),
    ],
)
def test_the_gate_reads_the_records_back_and_catches_what_preparation_should_have_dropped(
    prepared_chat, tmp_path, damage, failed
):
    out, config = prepared_chat
    _edit_first_record(out, damage)
    with pytest.raises(ValidationFailed, match=f"column={failed}") as error:
        validate_aligned(out, config, tmp_path / "report.json", docs_dir=tmp_path / "docs")
    assert "nothing was versioned or trained" in str(error.value)
    assert (tmp_path / "docs" / "index.html").is_file()


def test_the_gate_searches_with_every_detector_and_lets_only_allowed_kinds_through(prepared_chat, tmp_path):
    """As the pretraining gate: what `data.pii` did not scrub is still found; `data.pii_allowed` lets a kind by."""
    import hashlib

    out, config = prepared_chat
    before = hashlib.sha256((out / "train.jsonl").read_text().splitlines()[0].encode()).hexdigest()
    _edit_first_record(
        out, lambda r: {"messages": [{**m, "content": "mail jane.doe@example.com"} for m in r["messages"]]}
    )
    after = hashlib.sha256((out / "train.jsonl").read_text().splitlines()[0].encode()).hexdigest()
    (out / "records.csv").write_text((out / "records.csv").read_text().replace(before, after))  # still listed
    not_scrubbed = config.model_copy(update={"data": config.data.model_copy(update={"pii": ["phone"]})})
    with pytest.raises(ValidationFailed, match="column=pii_found"):
        validate_aligned(out, not_scrubbed, tmp_path / "report.json")
    allowed = config.model_copy(update={"data": config.data.model_copy(update={"pii_allowed": ["email"]})})
    validate_aligned(out, allowed, tmp_path / "report.json")


def test_the_gate_asks_the_independent_secret_scanner_too(prepared_chat, tmp_path):
    """#55 point 8: alignment data gets the second detector the pretraining gate has. `db_pass := VALUE` is a
    secret only the scanner (`foundry.data.privacy.secret_scan`) finds: the scrubber's patterns miss it."""
    import hashlib

    from foundry.data.privacy import pii, secret_scan

    leak = "db_pass := Zx9Qw2Lm8Rt5Vb3Nc7HjK4pW"
    assert not list(pii.find(leak)) and secret_scan.kinds(leak) == {"secret_assignment"}
    out, config = prepared_chat
    before = hashlib.sha256((out / "train.jsonl").read_text().splitlines()[0].encode()).hexdigest()
    _edit_first_record(out, lambda r: {"messages": [{**m, "content": leak} for m in r["messages"]]})
    after = hashlib.sha256((out / "train.jsonl").read_text().splitlines()[0].encode()).hexdigest()
    (out / "records.csv").write_text((out / "records.csv").read_text().replace(before, after))  # still listed
    with pytest.raises(ValidationFailed, match="column=pii_found"):
        validate_aligned(out, config, tmp_path / "report.json")


def test_the_gate_checks_the_arrays_against_the_vocabulary_and_the_records(prepared_chat, tmp_path):
    out, config = prepared_chat
    offsets = np.load(out / "train.tokens.offsets.npy")
    tokens = np.load(out / "train.tokens.npy")[: offsets[-2]]  # the last record gone, offsets consistent
    tokens[0] = 60000  # beyond the vocabulary
    np.save(out / "train.tokens.npy", tokens)
    np.save(out / "train.tokens.offsets.npy", offsets[:-1])
    with pytest.raises(ValidationFailed) as error:
        validate_aligned(out, config, tmp_path / "report.json")
    failed = {(suite, e.kwargs.get("column", e.kwargs.get("column_A"))) for suite, e in error.value.report.failures()}
    assert failed == {("arrays", "max_id"), ("arrays", "records")}


def test_the_instruction_set_is_deterministic_and_held_out_instances_are_unseen(tmp_path):
    a = write_instruction_set(tmp_path / "a", train=40, test=10, pairs=20)
    b = write_instruction_set(tmp_path / "b", train=40, test=10, pairs=20)
    assert all(a[k].read_bytes() == b[k].read_bytes() for k in a)
    for task in TASKS:
        train = {x.prompt for x in instances(task, "train", 40)}
        test, oov = instances(task, "test", 10), instances(task, "oov", 10)
        assert not train & {x.prompt for x in test} and not train & {x.prompt for x in oov}
        assert all(plausible_wrong(x, random.Random(0)) != x.answer for x in test)
    example = {x.task: x for x in (instances(t, "test", 1)[0] for t in TASKS)}
    assert example["add"].answer == str(sum(int(n) for n in re.findall(r"\d+", example["add"].prompt)))
    assert example["snake"].answer == example["snake"].answer.lower() and "_" in example["snake"].answer


def test_foundry_instructions_writes_what_align_reads(tmp_path, capsys):
    from foundry.cli import main

    assert main(["instructions", str(tmp_path / "set"), "--train", "12", "--test", "3", "--pairs", "4"]) == 0
    printed = capsys.readouterr().out.split()
    for name in ("sft", "dpo", "test", "oov", "pairs"):
        assert name in printed
    oov = [json.loads(line) for line in (tmp_path / "set" / "eval" / "oov.jsonl").read_text().splitlines()]
    assert len(oov) == 3 * len(TASKS) and {e["task"] for e in oov} == set(TASKS)
    assert len((tmp_path / "set" / "dpo" / "train.jsonl").read_text().splitlines()) == 4 * len(TASKS)


def test_the_dataset_key_follows_records_tokenizer_context_and_method(chat_tokenizer, tmp_path):
    """The align flow's data task is cached under this key: same inputs, same dataset version, no compute."""
    from foundry.align.prepare import align_dataset_key

    other_tokenizer = tmp_path / "tokenizer.json"
    other_tokenizer.write_text(chat_tokenizer.read_text().replace("<|end|>", "<|stop|>"))
    source = tmp_path / "src"
    base = align_dataset_key(config_for(source, "chat", chat_tokenizer), "digest-1")
    assert align_dataset_key(config_for(source, "chat", chat_tokenizer, "align.train.max_steps=5"), "digest-1") == base
    for changed in (
        align_dataset_key(config_for(source, "chat", chat_tokenizer), "digest-2"),
        align_dataset_key(config_for(source, "preference", chat_tokenizer), "digest-1"),
        align_dataset_key(config_for(source, "chat", other_tokenizer), "digest-1"),
        align_dataset_key(config_for(source, "chat", chat_tokenizer, "model.block_size=40"), "digest-1"),
    ):
        assert changed != base
