"""One reply to one chat with the counts a chat-completions answer reports: tokens in and out, and why it ended.

`generate_replies` returns text only; a chat-completions answer must also say whether the reply ended at the
template's end marker ("stop") or ran into its token budget ("length"), which only the token ids tell. The
same rendering and the same generation (`generate_ids`), so the same chat gives the same text.

`ReplyStream` is the same reply handed out as it is generated: pieces of text, token by token, a piece never
ending inside a multi-byte character (`TextPieces`), then the same `Reply`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from models.generate import Sampling, generate_ids, generated_steps, prompt_ids
from models.gpt import GPT

Chunks = Iterator[dict]  # a streamed answer: its chunks in OpenAI's shape, each made as it is asked for


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
    [content] = generate_ids(model, [ids], s.max_new_tokens, s.temperature, s.top_k, s.seed, end, s.deadline)
    stopped = len(content) < s.max_new_tokens  # `generate_ids` leaves the end marker out; only it ends a row early
    return Reply(
        text=template.decode_reply(tokenizer, content),
        finish_reason="stop" if stopped else "length",
        prompt_tokens=len(ids),
        completion_tokens=len(content) + int(stopped),
    )


class TextPieces:
    """The text of a growing list of token ids, handed out piece by piece as tokens arrive. Byte-level BPE splits a
    multi-byte character over tokens, and its first ones alone decode to U+FFFD: a piece never ends in one, those
    bytes held back until the token that completes them (or `rest`, at the end). The pieces join to `decode` of all
    the ids, up to the first of the `stops` strings it holds (then `stopped`, and the stop string is not sent);
    text that may be the start of a stop string is held back until it cannot be. Each push decodes every id so far
    (a reply is at most a few thousand tokens: microseconds)."""

    def __init__(self, decode: Callable[[list[int]], str], stops: tuple[str, ...] = ()):
        self.decode, self.stops, self.ids, self.sent, self.stopped = decode, stops, [], "", False

    def push(self, token: int) -> str:
        self.ids.append(token)
        return self._piece(self.decode(self.ids).rstrip("\ufffd"), final=False)

    def rest(self) -> str:
        """What is left to send once no token follows (an incomplete character, as U+FFFD)."""
        return self._piece(self.decode(self.ids), final=True)

    def _piece(self, text: str, final: bool) -> str:
        if self.stopped:
            return ""
        found = [at for at in (text.find(stop) for stop in self.stops) if at >= 0]
        if found:
            text, self.stopped = text[: min(found)], True
        elif not final:
            text = text[: len(text) - self._maybe_stop(text)]
        if not text.startswith(self.sent):  # never for byte-level BPE; sent text cannot be taken back
            return ""
        piece, self.sent = text[len(self.sent) :], text
        return piece

    def _maybe_stop(self, text: str) -> int:
        """How many characters at the end of `text` begin a stop string (0: none)."""
        longest = max((len(stop) for stop in self.stops), default=1) - 1
        for size in range(min(longest, len(text)), 0, -1):
            if any(stop.startswith(text[-size:]) for stop in self.stops):
                return size
        return 0


class ReplyStream:
    """A reply generated as it is iterated, after the token ids `ids`, until `stop_token` or
    `sampling.max_new_tokens`: each item a piece of its text (possibly empty: a token whose bytes are held back), and
    once iteration ends, `reply` its `Reply` (for a chat, the one `complete_chat` gives: same text, same counts) and
    `tokens` the ids generated. Nothing is generated until the first item is asked for, nor after the last one asked.
    `chat_stream` makes one for a chat; `decode` gives the text of generated ids."""

    def __init__(
        self, model: GPT, ids: list[int], stop_token: int, decode, sampling: Sampling, prefix="chatcmpl", stops=()
    ):
        self.model, self.ids, self.end, self.sampling = model, ids, stop_token, sampling
        self.pieces = TextPieces(decode, tuple(stops))
        self.reply: Reply | None = None
        self.id = f"{prefix}-{uuid.uuid4().hex}"

    @property
    def tokens(self) -> list[int]:
        return self.pieces.ids

    def __iter__(self) -> Iterator[str]:
        s, count, ended = self.sampling, 0, False
        steps = generated_steps(
            self.model, [self.ids], s.max_new_tokens, s.temperature, s.top_k, s.seed, self.end, s.deadline
        )
        for [(_, token)] in steps:
            if token == self.end:
                ended = True
                break
            count += 1
            yield self.pieces.push(token)
            if self.pieces.stopped:  # a stop string: the tokens after it are not generated
                break
        yield self.pieces.rest()  # the text held back, as far as a stop string in it (found only now: U+FFFD)
        self.reply = Reply(
            text=self.pieces.sent,
            finish_reason="stop" if ended or self.pieces.stopped else "length",
            prompt_tokens=len(self.ids),
            completion_tokens=count + int(ended),
            id=self.id,
        )


def chat_stream(
    model: GPT, tokenizer, template, messages: list[dict], sampling: Sampling, stops: tuple[str, ...] = ()
) -> ReplyStream:
    """`complete_chat`'s reply as a `ReplyStream` (ending at the first of `stops` too); a ValueError now when the
    chat cannot be rendered or held."""
    ids = prompt_ids(model, tokenizer, template, messages)
    end = template.token_id(tokenizer, template.end)
    decode = lambda generated: template.decode_reply(tokenizer, generated)  # noqa: E731
    return ReplyStream(model, ids, end, decode, sampling, stops=stops)


def chat_chunks(stream: ReplyStream, model: str | None, include_usage: bool) -> Chunks:
    """`stream` as OpenAI streams a chat completion: a chunk naming the assistant's role, one per piece of text as
    it is generated, one with `finish_reason`, then (`include_usage`) one with `usage` and no choices; every chunk
    before it has `usage` None."""
    created = int(time.time())

    def chunk(choices: list[dict], usage: dict | None = None) -> dict:
        found = {"id": stream.id, "object": "chat.completion.chunk", "created": created, "model": model}
        return {**found, "choices": choices, **({"usage": usage} if include_usage else {})}

    def choice(delta: dict, finish_reason: str | None = None) -> list[dict]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]

    yield chunk(choice({"role": "assistant", "content": ""}))
    for piece in stream:
        if piece:
            yield chunk(choice({"content": piece}))
    reply = stream.reply
    yield chunk(choice({}, reply.finish_reason))
    if include_usage:
        counts = (reply.prompt_tokens, reply.completion_tokens, reply.total_tokens)
        yield chunk([], dict(zip(("prompt_tokens", "completion_tokens", "total_tokens"), counts, strict=True)))
