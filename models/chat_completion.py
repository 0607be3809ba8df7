"""One reply to one chat with the counts a chat-completions answer reports: tokens in and out, and why it ended.

`generate_replies` returns text only; a chat-completions answer must also say whether the reply ended at the
template's end marker ("stop") or ran into its token budget ("length"), which only the token ids tell. The
same rendering and the same generation (`generate_ids`), so the same chat gives the same text.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from models.generate import Sampling, generate_ids, prompt_ids
from models.gpt import GPT


@dataclass(frozen=True)
class Reply:
    text: str
    finish_reason: str  # "stop": the model closed its turn; "length": it hit max_new_tokens first
    prompt_tokens: int  # the rendered conversation and the assistant's marker
    completion_tokens: int  # every token generated, the end marker included when reached
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def complete_chat(
    model: GPT,
    tokenizer,
    template,
    messages: list[dict],
    sampling: Sampling,
) -> Reply:
    """The assistant's next reply to `messages`, generated until the end marker or `sampling.max_new_tokens`."""
    ids = prompt_ids(model, tokenizer, template, messages)
    end = template.token_id(tokenizer, template.end)
    s = sampling
    [content] = generate_ids(model, [ids], s.max_new_tokens, s.temperature, s.top_k, s.seed, end)
    stopped = len(content) < s.max_new_tokens  # `generate_ids` leaves the end marker out; only it ends a row early
    return Reply(
        text=template.decode_reply(tokenizer, content),
        finish_reason="stop" if stopped else "length",
        prompt_tokens=len(ids),
        completion_tokens=len(content) + int(stopped),
    )
