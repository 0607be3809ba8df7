"""Alignment records: the shapes a `.jsonl` line may take, their checks, and the arrays they become.

- chat:            {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
- prompt/response: {"prompt": "...", "response": "..."} (optionally "system"), one exchange
- preference:      {"prompt": "...", "chosen": "...", "rejected": "..."} (optionally "system")

`sft` trains on the first two, `dpo` on the third. A record that breaks a rule raises `RecordProblem`
with a reason (counted, or reported with its file and line, by `data.on_error`).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.align_data import Conversations, Pairs, Ragged
from models.chat import ROLES, ChatTemplate

SHAPE_KEYS = {
    "chat": {"messages"},
    "prompt_response": {"prompt", "response"},
    "preference": {"prompt", "chosen", "rejected"},
}
OPTIONAL_KEYS = {"system"}
SHAPES_OF = {"sft": ("chat", "prompt_response"), "dpo": ("preference",)}
# The ragged arrays of a split, by dataset kind; each field is `<split>.<field>.npy` with `<split>.<field>.offsets.npy`.
FIELDS = {"chat": ("tokens", "trained"), "preference": ("prompt", "chosen", "rejected")}
KIND_OF = {"sft": "chat", "dpo": "preference"}


class RecordProblem(ValueError):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class Conversation:
    messages: tuple[tuple[str, str], ...]  # (role, content)

    def as_messages(self) -> list[dict]:
        return [{"role": r, "content": c} for r, c in self.messages]

    def to_json(self) -> dict:
        return {"messages": self.as_messages()}


@dataclass(frozen=True)
class Preference:
    prompt: tuple[tuple[str, str], ...]  # the messages before the reply: an optional system turn, the user's
    chosen: str
    rejected: str

    def prompt_messages(self) -> list[dict]:
        return [{"role": r, "content": c} for r, c in self.prompt]

    def to_json(self) -> dict:
        return {"prompt": self.prompt_messages(), "chosen": self.chosen, "rejected": self.rejected}


def normalise_content(text: str) -> str:
    """NFC and unix newlines; nothing else: in a reply every character may be the answer."""
    return unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")


def shape_of(record: dict) -> str:
    keys = set(record) - OPTIONAL_KEYS
    for shape, wanted in SHAPE_KEYS.items():
        if keys == wanted:
            return shape
    raise RecordProblem(
        "unknown_shape", f"keys {sorted(record)}; expected messages, prompt+response or prompt+chosen+rejected"
    )


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise RecordProblem("malformed_record", f"{what} is {type(value).__name__}, not a string")
    text = normalise_content(value)
    if not text.strip():
        raise RecordProblem("empty_content", f"{what} is empty")
    return text


def _messages(value) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not value:
        raise RecordProblem("malformed_record", "messages must be a non-empty list")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise RecordProblem("malformed_record", f"message {i} must be an object with role and content")
        role = message["role"]
        if role not in ROLES or (role == "system" and i > 0):
            raise RecordProblem(
                "invalid_role", f"message {i} has role {role!r}; system (first only), user or assistant"
            )
        messages.append((role, _text(message["content"], f"message {i} content")))
    return messages


def _system(record: dict) -> list[tuple[str, str]]:
    return [("system", _text(record["system"], "system"))] if "system" in record else []


def parse_record(record: dict, method: str, template: ChatTemplate) -> Conversation | Preference:
    """The record as a typed value, or `RecordProblem` naming the rule it breaks."""
    shape = shape_of(record)
    if shape not in SHAPES_OF[method]:
        raise RecordProblem(
            "wrong_shape", f"a {shape} record; align.method {method} reads {' or '.join(SHAPES_OF[method])}"
        )
    if shape == "chat":
        messages = _messages(record["messages"])
        if "assistant" not in (role for role, _ in messages):
            raise RecordProblem("no_assistant_turn", "nothing to learn from a conversation without the assistant")
        parsed: Conversation | Preference = Conversation(tuple(messages))
    elif shape == "prompt_response":
        parsed = Conversation(
            (
                *_system(record),
                ("user", _text(record["prompt"], "prompt")),
                ("assistant", _text(record["response"], "response")),
            )
        )
    else:
        chosen, rejected = _text(record["chosen"], "chosen"), _text(record["rejected"], "rejected")
        if chosen == rejected:
            raise RecordProblem("identical_pair", "chosen and rejected are the same reply")
        parsed = Preference((*_system(record), ("user", _text(record["prompt"], "prompt"))), chosen, rejected)
    contents = [c for _, c in (parsed.messages if isinstance(parsed, Conversation) else parsed.prompt)]
    if isinstance(parsed, Preference):
        contents += [parsed.chosen, parsed.rejected]
    if any(marker in c for c in contents for marker in template.special_tokens):
        raise RecordProblem(
            "marker_in_content", f"content holds one of the template's markers {template.special_tokens}"
        )
    return parsed


def encode(record: Conversation | Preference, tokenizer, template: ChatTemplate) -> dict[str, list[int]]:
    """The record's ragged fields (`FIELDS`) as token ids."""
    if isinstance(record, Conversation):
        tokens, trained = template.encode(tokenizer, record.as_messages())
        return {"tokens": tokens, "trained": trained}
    return {
        "prompt": template.encode_prompt(tokenizer, record.prompt_messages()),
        "chosen": template.encode_reply(tokenizer, record.chosen),
        "rejected": template.encode_reply(tokenizer, record.rejected),
    }


def context_tokens(fields: dict[str, list[int]]) -> int:
    """Tokens the record needs in the context at once: the conversation, or the prompt and its longer reply."""
    if "tokens" in fields:
        return len(fields["tokens"])
    return len(fields["prompt"]) + max(len(fields["chosen"]), len(fields["rejected"]))


def save_split(out_dir: Path, split: str, records: list[dict[str, list[int]]], kind: str) -> None:
    for field in FIELDS[kind]:
        ragged = Ragged.from_lists([r[field] for r in records])
        np.save(out_dir / f"{split}.{field}.npy", ragged.values)
        np.save(out_dir / f"{split}.{field}.offsets.npy", ragged.offsets)


def load_field(data_dir: Path, split: str, field: str) -> Ragged:
    return Ragged(np.load(data_dir / f"{split}.{field}.npy"), np.load(data_dir / f"{split}.{field}.offsets.npy"))


def load_conversations(data_dir: Path, split: str) -> Conversations:
    return Conversations(load_field(data_dir, split, "tokens"), load_field(data_dir, split, "trained"))


def load_pairs(data_dir: Path, split: str) -> Pairs:
    return Pairs(*(load_field(data_dir, split, f) for f in FIELDS["preference"]))
