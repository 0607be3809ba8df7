"""A text's own token log-probabilities under the model: what a completions answer reports with `logprobs` (each
token's, and the likeliest few at each position), for the prompt too with `echo`.

One forward pass over the whole text (prompt and completion), in float32: a token's log-probability is the
log-softmax of the logits at the position before it, the model's own distribution (no temperature, no top-k).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from models.chat_completion import Chunks, ReplyStream
from models.gpt import GPT


@dataclass(frozen=True)
class TokenLogprobs:
    """For each token of a text from `first` on: its log-probability (None for the text's first token, which
    nothing precedes) and the `top` likeliest tokens at its position, (id, log-probability), likeliest first."""

    tokens: list[int]
    logprobs: list[float | None]
    top: list[list[tuple[int, float]]]


@torch.no_grad()
def token_logprobs(model: GPT, ids: list[int], first: int, top: int) -> TokenLogprobs:
    """The log-probabilities of `ids[first:]` after the ids before each; a ValueError when the text is longer than
    the context (past it the model slides a window, and no single pass scores the whole text)."""
    if len(ids) > model.config.block_size:
        raise ValueError(f"the text is {len(ids)} tokens; the context holds {model.config.block_size}")
    device = model.wte.weight.device
    logits, _ = model(torch.tensor([ids], device=device))
    scores = F.log_softmax(logits[0].float(), dim=-1).cpu()  # row t: the distribution of token t + 1
    logprobs: list[float | None] = []
    tops: list[list[tuple[int, float]]] = []
    for t in range(first, len(ids)):
        if t == 0:
            logprobs.append(None)
            tops.append([])
            continue
        row = scores[t - 1]
        logprobs.append(float(row[ids[t]]))
        best = torch.topk(row, top) if top else None
        tops.append([] if best is None else list(zip(best.indices.tolist(), best.values.tolist(), strict=True)))
    return TokenLogprobs(list(ids[first:]), logprobs, tops)


def text_completion(model: str | None, choices: list[dict], counts: dict) -> dict:
    """A `text_completion` answer of `choices` (each {text, index, logprobs, finish_reason}) and `counts` (`usage`)."""
    found = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time())}
    return {**found, "model": model, "choices": choices, "usage": counts}


def completion_logprobs(tokenizer, scored: TokenLogprobs, offset: int) -> dict:
    """`scored` in a completions answer's `logprobs` shape; `offset` the character where its first token starts.
    A `top_logprobs` key is the token's text, or `token_id:N` (vLLM's spelling) where that text is no token's own (a
    piece of a multi-byte character, a control token: empty) or another key's already, so that no entry is lost."""
    texts = [tokenizer.decode([token], skip_special_tokens=False) for token in scored.tokens]
    starts = [offset + sum(len(text) for text in texts[:i]) for i in range(len(texts))]
    tops = [_top_entries(tokenizer, best) if best else None for best in scored.top]
    return {"tokens": texts, "token_logprobs": scored.logprobs, "top_logprobs": tops, "text_offset": starts}


def _top_entries(tokenizer, best: list[tuple[int, float]]) -> dict[str, float]:
    entries: dict[str, float] = {}
    for token, value in best:
        text = tokenizer.decode([token], skip_special_tokens=False)
        clean = text and "\ufffd" not in text and text not in entries
        entries[text if clean else f"token_id:{token}"] = value
    return entries


def text_chunks(stream: ReplyStream, model: str | None, include_usage: bool, echoed: str) -> Chunks:
    """`stream` as OpenAI streams a completion: `echoed` first (the prompt, with `echo`), a chunk per piece of text,
    one with `finish_reason`, then (`include_usage`) one with `usage` and no choices."""
    created = int(time.time())

    def chunk(text: str | None, finish_reason: str | None = None, usage: dict | None = None) -> dict:
        choices = [] if text is None else [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}]
        found = {"id": stream.id, "object": "text_completion", "created": created, "model": model, "choices": choices}
        return {**found, **({"usage": usage} if include_usage else {})}

    if echoed:
        yield chunk(echoed)
    for piece in stream:
        if piece:
            yield chunk(piece)
    reply = stream.reply
    yield chunk("", reply.finish_reason)
    if include_usage:
        yield chunk(None, usage=token_counts(reply.prompt_tokens, reply.completion_tokens))


def token_counts(prompt_tokens: int, completion_tokens: int) -> dict:
    total = prompt_tokens + completion_tokens
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": total}


def _byte_of_char() -> dict[str, int]:
    """Byte-level BPE's table (GPT-2's): the character each byte is written as in the vocabulary, reversed."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


BYTE_OF_CHAR = _byte_of_char()


def token_bytes(tokenizer, token: int) -> list[int]:
    """The bytes a token stands for (a piece of a multi-byte character is its own bytes, not U+FFFD): its
    vocabulary entry read through byte-level BPE's table; a control token, its own string's UTF-8."""
    entry = tokenizer.id_to_token(token) or ""
    if entry and all(char in BYTE_OF_CHAR for char in entry):
        return [BYTE_OF_CHAR[char] for char in entry]
    return list(entry.encode())


def chat_logprobs(tokenizer, scored: TokenLogprobs) -> dict:
    """`scored` (a reply's tokens) in a chat completion's `logprobs` shape: `content`, one entry per token with its
    text, log-probability, bytes and the likeliest tokens at its position."""

    def entry(token: int, value: float) -> dict:
        text = tokenizer.decode([token], skip_special_tokens=False)
        return {"token": text, "logprob": value, "bytes": token_bytes(tokenizer, token)}

    content = [
        {**entry(token, value), "top_logprobs": [entry(*best) for best in tops]}
        for token, value, tops in zip(scored.tokens, scored.logprobs, scored.top, strict=True)
    ]
    return {"content": content}
