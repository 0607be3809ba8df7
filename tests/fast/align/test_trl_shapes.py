"""TRL's dataset shapes beside Foundry's own: prompt/completion (standard and conversational), messages, and
conversational preference pairs with an explicit or implicit prompt; each malformed record refused by reason,
with its file and line under `data.on_error=fail`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foundry.align.prepare import prepare_aligned
from foundry.align.records import Conversation, Preference, RecordProblem, load_pairs, parse_record
from foundry.align.validate import validate_aligned
from foundry.config import load_config
from foundry.data.acquire import acquire_source
from foundry.data.formats import BadInputError
from models.chat import ChatTemplate

TEMPLATE = ChatTemplate()


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


SYSTEM = {"role": "system", "content": "Be brief."}

ACCEPTED = [
    ("sft", {"prompt": "Add: 1 + 2", "completion": "3"}, Conversation((("user", "Add: 1 + 2"), ("assistant", "3")))),
    (
        "sft",
        {"system": "Be brief.", "prompt": "Add: 1 + 2", "completion": "3"},
        Conversation((("system", "Be brief."), ("user", "Add: 1 + 2"), ("assistant", "3"))),
    ),
    (
        "sft",
        {"prompt": [SYSTEM, user("Add: 1 + 2")], "completion": [assistant("3")]},
        Conversation((("system", "Be brief."), ("user", "Add: 1 + 2"), ("assistant", "3"))),
    ),
    (
        "sft",
        {"messages": [user("Add: 1 + 2"), assistant("3"), user("Add: 2 + 2"), assistant("4")]},
        Conversation((("user", "Add: 1 + 2"), ("assistant", "3"), ("user", "Add: 2 + 2"), ("assistant", "4"))),
    ),
    (
        "dpo",
        {"prompt": [SYSTEM, user("Add: 1 + 2")], "chosen": [assistant("3")], "rejected": [assistant("4")]},
        Preference((("system", "Be brief."), ("user", "Add: 1 + 2")), "3", "4"),
    ),
    (  # implicit prompt: the messages both share, here a whole earlier exchange
        "dpo",
        {
            "chosen": [user("Add: 1 + 2"), assistant("3"), user("Add: 2 + 2"), assistant("4")],
            "rejected": [user("Add: 1 + 2"), assistant("3"), user("Add: 2 + 2"), assistant("5")],
        },
        Preference((("user", "Add: 1 + 2"), ("assistant", "3"), ("user", "Add: 2 + 2")), "4", "5"),
    ),
    ("dpo", {"prompt": "Add: 1 + 2", "chosen": "3", "rejected": "4"}, Preference((("user", "Add: 1 + 2"),), "3", "4")),
]


@pytest.mark.parametrize(("method", "record", "expected"), ACCEPTED)
def test_every_trl_shape_becomes_the_typed_record(method, record, expected):
    assert parse_record(record, method, TEMPLATE) == expected


# (method, record, reason, words the message must hold)
REFUSED = [
    ("sft", {"prompt": "a", "completion": [assistant("b")]}, "malformed_record", "must be all strings or all message lists"),
    ("sft", {"prompt": [user("a")], "completion": [user("b")]}, "invalid_role", "completion messages must all be"),
    ("sft", {"prompt": [user("a"), assistant("b"), user("c")], "completion": [assistant("d")]}, "assistant_in_prompt", ""),
    ("sft", {"prompt": [assistant("a")], "completion": [assistant("b")]}, "invalid_role", "end with a user message"),
    ("sft", {"system": "s", "prompt": [user("a")], "completion": [assistant("b")]}, "malformed_record", "system turn"),
    ("sft", {"prompt": [], "completion": [assistant("b")]}, "malformed_record", "prompt must be a non-empty list"),
    ("sft", {"prompt": [user("a")], "completion": [{"role": "assistant"}]}, "malformed_record", "completion message 0"),
    ("sft", {"prompt": "a", "completion": ""}, "empty_content", "completion is empty"),
    ("dpo", {"prompt": [user("a")], "chosen": [assistant("b")], "rejected": [assistant("b")]}, "identical_pair", ""),
    ("dpo", {"prompt": [user("a")], "chosen": [assistant("b"), assistant("c")], "rejected": [assistant("d")]},
     "malformed_record", "chosen must be one assistant message, not 2"),
    ("dpo", {"chosen": "The sky is blue.", "rejected": "The sky is green."}, "malformed_record", "implicit prompt"),
    ("dpo", {"chosen": [user("a"), assistant("b")], "rejected": [user("z"), assistant("c")]}, "malformed_record",
     "share must end with a user one"),
    ("dpo", {"chosen": [user("a"), assistant("b")], "rejected": [user("a"), assistant("c"), user("d")]},
     "malformed_record", "rejected must be one assistant message"),
    ("dpo", {"prompt": "a", "completion": "b"}, "wrong_shape", "align.method dpo reads preference"),
    ("sft", {"chosen": [user("a"), assistant("b")], "rejected": [user("a"), assistant("c")]}, "wrong_shape", ""),
    ("sft", {"prompt": "a", "completion": "b", "label": True}, "unknown_shape", "prompt+completion"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "record", "reason", "words"), REFUSED)
def test_a_malformed_trl_record_is_refused_with_its_reason(method, record, reason, words):
    with pytest.raises(RecordProblem) as problem:
        parse_record(record, method, TEMPLATE)
    assert problem.value.reason == reason and words in str(problem.value)


def prepare(tmp_path: Path, method: str, records: list, tokenizer: Path, *extra: str):
    source = tmp_path / "src"
    source.mkdir()
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    (source / "trl.jsonl").write_text("\n".join(lines) + "\n")
    settings = [f"data.source={source}", f"align.method={method}", f"tokenizer.from_file={tokenizer}"]
    config = load_config(None, [*settings, "model.block_size=48", "data.holdout_fraction=0.3", *extra])
    out = tmp_path / "prepared"
    return prepare_aligned(acquire_source(config.data, tmp_path / "m.json"), config, out), out, config


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_a_file_of_trl_records_prepares_and_passes_the_gate(method, chat_tokenizer, tmp_path):
    records = [r for m, r, _ in ACCEPTED if m == method]
    records += [
        {"prompt": [user(f"Add: {n} + 1")], "chosen": [assistant(str(n + 1))], "rejected": [assistant("0")]}
        if method == "dpo"
        else {"prompt": [user(f"Add: {n} + 1")], "completion": [assistant(str(n + 1))]}
        for n in range(5, 9)
    ]
    manifest, out, config = prepare(tmp_path, method, records, chat_tokenizer)
    # The standard record with a system key and its conversational twin are one record: the second goes.
    twins = 1 if method == "sft" else 0
    assert manifest.stats["records_out"] == len(records) - twins
    assert manifest.stats.get("dropped_exact_duplicate", 0) == twins
    assert validate_aligned(out, config, tmp_path / "report.json").success
    if method == "dpo":
        pairs = [load_pairs(out, split) for split in ("train", "holdout")]
        assert sum(len(p.prompt) for p in pairs) == len(records)


@pytest.mark.parametrize(
    ("method", "bad", "message"),
    [
        (
            "sft",
            {"prompt": "a", "completion": [assistant("b")]},
            "trl.jsonl:2: malformed record prompt, completion must be all strings",
        ),
        (
            "sft",
            {"messages": [user("a"), {"role": "assistant", "content": 5}]},
            "trl.jsonl:2: malformed record messages message 1 content is int, not a string",
        ),
        (
            "dpo",
            {"prompt": [user("a")], "chosen": [assistant("b")], "rejected": [assistant("c"), assistant("d")]},
            "trl.jsonl:2: malformed record rejected must be one assistant message, not 2 messages",
        ),
    ],
)
def test_on_error_fail_names_the_line_and_what_is_wrong(method, bad, message, chat_tokenizer, tmp_path):
    good = ACCEPTED[0][1] if method == "sft" else ACCEPTED[4][1]
    with pytest.raises(BadInputError, match=message):
        prepare(tmp_path, method, [good, bad], chat_tokenizer, "data.on_error=fail")
