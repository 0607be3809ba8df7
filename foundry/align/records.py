"""Alignment records: the shapes a `.jsonl` line may take, their checks, and the arrays they become.

For `sft` (a conversation; training learns every assistant turn):
- chat (TRL's conversational language modeling): {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}]}
- prompt/response: {"prompt": "...", "response": "..."} (optionally "system"), one exchange
- prompt/completion (TRL's): {"prompt": "...", "completion": "..."} (optionally "system"), or conversational,
  {"prompt": [messages without an assistant turn], "completion": [assistant messages]}
For `dpo` (a prompt and two replies):
- preference: {"prompt": "...", "chosen": "...", "rejected": "..."} (optionally "system"), or conversational,
  {"prompt": [messages], "chosen": [one assistant message], "rejected": [one assistant message]}
- implicit-prompt preference (TRL's conversational): {"chosen": [messages], "rejected": [messages]}: the prompt
  is the leading messages both share, and each must end in one assistant message after it

A record that breaks a rule raises `RecordProblem` with a reason (counted, or reported with its file and line,
by `data.on_error`).
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
    "prompt_completion": {"prompt", "completion"},
    "preference": {"prompt", "chosen", "rejected"},
    "implicit_preference": {"chosen", "rejected"},
}
OPTIONAL_KEYS = {"system"}
SHAPES_OF = {"sft": ("chat", "prompt_response", "prompt_completion"), "dpo": ("preference", "implicit_preference")}
# The ragged arrays of a split, by dataset kind; each field is `<split>.<field>.npy` with `<split>.<field>.offsets.npy`.
FIELDS = {"chat": ("tokens", "trained"), "preference": ("prompt", "chosen", "rejected")}
KIND_OF = {"sft": "chat", "dpo": "preference"}
Turns = tuple[tuple[str, str], ...]  # (role, content)


class RecordProblem(ValueError):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


def _asked(turns: Turns) -> tuple[str, ...]:
    return tuple(content for role, content in turns if role == "user")


@dataclass(frozen=True)
class Conversation:
    messages: Turns

    @property
    def asked(self) -> tuple[str, ...]:
        """What the user asked, turn by turn: the record's identity for the split (`split_ledger`)."""
        return _asked(self.messages)

    def as_messages(self) -> list[dict]:
        return [{"role": r, "content": c} for r, c in self.messages]

    def to_json(self) -> dict:
        return {"messages": self.as_messages()}


@dataclass(frozen=True)
class Preference:
    prompt: Turns  # the messages before the reply: an optional system turn, then the conversation so far
    chosen: str
    rejected: str

    @property
    def asked(self) -> tuple[str, ...]:
        return _asked(self.prompt)

    def prompt_messages(self) -> list[dict]:
        return [{"role": r, "content": c} for r, c in self.prompt]

    def to_json(self) -> dict:
        return {"prompt": self.prompt_messages(), "chosen": self.chosen, "rejected": self.rejected}


def from_kept(record: dict) -> Conversation | Preference:
    """A record as a data version keeps it (`to_json`, checked when it was prepared) back as a typed value."""
    if "messages" in record:
        return Conversation(tuple((m["role"], m["content"]) for m in record["messages"]))
    prompt = tuple((m["role"], m["content"]) for m in record["prompt"])
    return Preference(prompt, record["chosen"], record["rejected"])


def normalise_content(text: str) -> str:
    """NFC and unix newlines; nothing else: in a reply every character may be the answer."""
    return unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")


def shape_of(record: dict) -> str:
    keys = set(record) - OPTIONAL_KEYS
    for shape, wanted in SHAPE_KEYS.items():
        if keys == wanted:
            return shape
    raise RecordProblem(
        "unknown_shape",
        f"keys {sorted(record)}; expected messages, prompt+response, prompt+completion, prompt+chosen+rejected "
        "or chosen+rejected",
    )


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise RecordProblem("malformed_record", f"{what} is {type(value).__name__}, not a string")
    text = normalise_content(value)
    if not text.strip():
        raise RecordProblem("empty_content", f"{what} is empty")
    return text


def _messages(value, what: str = "messages", system_first: bool = True) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not value:
        raise RecordProblem("malformed_record", f"{what} must be a non-empty list of messages")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            raise RecordProblem("malformed_record", f"{what} message {i} must be an object with role and content")
        role = message["role"]
        if role not in ROLES or (role == "system" and (i > 0 or not system_first)):
            raise RecordProblem(
                "invalid_role", f"{what} message {i} has role {role!r}; system (first only), user or assistant"
            )
        messages.append((role, _text(message["content"], f"{what} message {i} content")))
    return messages


def _system(record: dict) -> list[tuple[str, str]]:
    return [("system", _text(record["system"], "system"))] if "system" in record else []


def _conversational(record: dict, keys: tuple[str, ...]) -> bool:
    """Whether the record's fields are message lists (TRL's conversational format) rather than strings; a
    mixture, or a `system` key beside message lists, is refused."""
    lists = [isinstance(record[k], list) for k in keys]
    if any(lists) and not all(lists):
        raise RecordProblem("malformed_record", f"{', '.join(keys)} must be all strings or all message lists")
    if all(lists) and "system" in record:
        raise RecordProblem("malformed_record", "with message lists, the system turn goes first in the prompt")
    return all(lists)


def _prompt_turns(value, what: str = "prompt") -> list[tuple[str, str]]:
    prompt = _messages(value, what)
    if prompt[-1][0] != "user":
        raise RecordProblem("invalid_role", f"{what} must end with a user message, not {prompt[-1][0]!r}")
    return prompt


def _one_reply(turns: list[tuple[str, str]], what: str) -> str:
    if len(turns) != 1 or turns[0][0] != "assistant":
        raise RecordProblem("malformed_record", f"{what} must be one assistant message, not {len(turns)} messages")
    return turns[0][1]


def _chat(record: dict) -> Conversation:
    messages = _messages(record["messages"])
    if "assistant" not in (role for role, _ in messages):
        raise RecordProblem("no_assistant_turn", "nothing to learn from a conversation without the assistant")
    return Conversation(tuple(messages))


def _exchange(record: dict, reply: str) -> Conversation:
    """prompt/response, or prompt/completion: TRL trains on the completion only, so a conversational prompt
    may not hold an assistant turn (training here learns every assistant turn of a conversation)."""
    if reply == "response" or not _conversational(record, ("prompt", reply)):
        prompt, answer = _text(record["prompt"], "prompt"), _text(record[reply], reply)
        return Conversation((*_system(record), ("user", prompt), ("assistant", answer)))
    prompt = _prompt_turns(record["prompt"])
    if any(role == "assistant" for role, _ in prompt):
        raise RecordProblem("assistant_in_prompt", "it would be trained on; write the conversation as messages")
    completion = _messages(record[reply], reply, system_first=False)
    if any(role != "assistant" for role, _ in completion):
        raise RecordProblem("invalid_role", f"{reply} messages must all be assistant messages")
    return Conversation((*prompt, *completion))


def _preference(record: dict) -> Preference:
    if "prompt" not in record:
        if not _conversational(record, ("chosen", "rejected")):
            raise RecordProblem("malformed_record", "an implicit prompt needs chosen and rejected as message lists")
        chosen, rejected = _messages(record["chosen"], "chosen"), _messages(record["rejected"], "rejected")
        shared = next((i for i, (c, r) in enumerate(zip(chosen, rejected)) if c != r), min(len(chosen), len(rejected)))
        prompt = chosen[:shared]
        if not prompt or prompt[-1][0] != "user":
            raise RecordProblem("malformed_record", "the messages chosen and rejected share must end with a user one")
        where = f"after the {shared} shared messages, chosen"
        pair = _one_reply(chosen[shared:], where), _one_reply(rejected[shared:], where.replace("chosen", "rejected"))
    elif _conversational(record, ("prompt", "chosen", "rejected")):
        prompt = _prompt_turns(record["prompt"])
        pair = (
            _one_reply(_messages(record["chosen"], "chosen", False), "chosen"),
            _one_reply(_messages(record["rejected"], "rejected", False), "rejected"),
        )
    else:
        prompt = [*_system(record), ("user", _text(record["prompt"], "prompt"))]
        pair = _text(record["chosen"], "chosen"), _text(record["rejected"], "rejected")
    if pair[0] == pair[1]:
        raise RecordProblem("identical_pair", "chosen and rejected are the same reply")
    return Preference(tuple(prompt), *pair)


def parse_record(record: dict, method: str, template: ChatTemplate) -> Conversation | Preference:
    """The record as a typed value, or `RecordProblem` naming the rule it breaks."""
    shape = shape_of(record)
    if shape not in SHAPES_OF[method]:
        raise RecordProblem(
            "wrong_shape", f"a {shape} record; align.method {method} reads {' or '.join(SHAPES_OF[method])}"
        )
    if shape == "chat":
        parsed: Conversation | Preference = _chat(record)
    elif shape in ("prompt_response", "prompt_completion"):
        parsed = _exchange(record, "response" if shape == "prompt_response" else "completion")
    else:
        parsed = _preference(record)
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
