"""Text generation with a trained model and its tokenizer, seeded so the same prompt gives the same text.

All prompts of a call are generated together (`models.kv_cache.Decoder`: left-padded rows, a key/value cache),
each with its own random generator seeded with `seed`: a prompt's completion is the one it gets alone. Under
`foundry serve-model`, with the rows of every other request running (`models.batching`), the same."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from models.gpt import GPT, sampling_probs
from models.kv_cache import Decoder
from models.request_limits import DEFAULTS, TimeLimit
from models.tokens import EOT

BATCHING = "batching"  # the served model's attribute holding its `models.batching.BatchingEngine`, if it has one


@dataclass(frozen=True)
class Sampling:
    """How a request's tokens are drawn: up to `max_new_tokens`, at `temperature`, from the `top_k` likeliest
    (None: all; 1: greedy), each row's generator seeded with `seed`, until `deadline` (`time.monotonic()`; None:
    none) at the latest. The defaults are the served model's."""

    max_new_tokens: int = DEFAULTS["max_new_tokens"]
    temperature: float = DEFAULTS["temperature"]
    top_k: int | None = DEFAULTS["top_k"]
    seed: int = DEFAULTS["seed"]
    deadline: float | None = None


def deadline_after(seconds: float) -> float:
    """The `Sampling.deadline` `seconds` from now."""
    return time.monotonic() + seconds


class RowDraws:
    """One row's random draws, as generating it alone makes them: `torch.multinomial` from its own generator,
    seeded with `seed`, once per token.

    Greedy decoding (top_k=1) picks the largest logit without drawing, unless two are equal: then only the
    draw breaks the tie, from the generator in the state all the earlier draws left it. Those skipped draws
    are made then, before the real one; each consumed what it would have, since multinomial's draw of one
    sample reads as many random numbers as the probabilities have entries, whatever their values (it is
    argmax(p / q) with q ~ Exp(1), `at::native::multinomial`)."""

    def __init__(self, seed: int):
        self.generator = torch.Generator().manual_seed(seed)
        self.skipped = 0

    def draw(self, probs: torch.Tensor) -> int:
        """A token drawn from `probs` (1, V)."""
        for _ in range(self.skipped):
            torch.multinomial(probs, num_samples=1, generator=self.generator)
        self.skipped = 0
        return int(torch.multinomial(probs, num_samples=1, generator=self.generator))


def choose(logits: torch.Tensor, temperature: float, top_k: int | None, draws: list[RowDraws]) -> list[int]:
    """Each row's next token from its logits (rows, V), drawn as `GPT.generate` draws it for that row alone."""
    logits = logits.cpu()
    if top_k != 1:
        probs = sampling_probs(logits, temperature, top_k)
        return [row.draw(probs[i : i + 1]) for i, row in enumerate(draws)]
    scaled = logits / max(temperature, 1e-6)  # ties as `sampling_probs` sees them
    best = scaled.max(dim=-1)
    tied = ((scaled == best.values[:, None]).sum(dim=-1) > 1).tolist()
    chosen = best.indices.tolist()
    for i, row in enumerate(draws):
        if tied[i]:
            chosen[i] = row.draw(sampling_probs(logits[i : i + 1], temperature, top_k))
        else:
            row.skipped += 1
    return chosen


@torch.no_grad()
def generated_steps(
    model: GPT,
    prompts: list[list[int]],
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    seed: int,
    stop_token: int | None,
    deadline: float | None = None,
) -> Iterator[list[tuple[int, int]]]:
    """Each step's (row, token) of the rows still going, as soon as the step has chosen them; a row's token is
    `stop_token` once, at the step it stops (then it leaves the batch; the others go on as before). Row i draws
    what `model.generate` draws for prompt i alone with `torch.Generator().manual_seed(seed)`. Past `deadline`
    (`time.monotonic()`), `TimeLimit` instead of the next step: no step starts after it.
    A model `foundry serve-model` serves has a `batching` engine (`models.batching`): the rows are generated there,
    in one batch with every other request's, each the same as here, under the same deadline."""
    engine = getattr(model, BATCHING, None)
    if engine is not None:
        yield from engine.steps(prompts, max_new_tokens, temperature, top_k, seed, stop_token, deadline)
        return
    draws = [RowDraws(seed) for _ in prompts]
    decoder = Decoder(model, prompts)
    for step in range(max_new_tokens):
        if not decoder.active:
            break
        if deadline is not None and time.monotonic() > deadline:
            raise TimeLimit(step)
        chosen = choose(decoder.next_logits(), temperature, top_k, [draws[row] for row in decoder.active])
        decoder.push(chosen)
        yield list(zip(decoder.active, chosen, strict=True))
        decoder.drop([row for row, token in zip(decoder.active, chosen, strict=True) if token == stop_token])


def generate_ids(
    model: GPT,
    prompts: list[list[int]],
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    seed: int,
    stop_token: int | None,
    deadline: float | None = None,
) -> list[list[int]]:
    """The tokens generated after each prompt, up to (without) `stop_token`: row i is what
    `model.generate` gives prompt i alone with `torch.Generator().manual_seed(seed)`; `TimeLimit` past `deadline`."""
    out: list[list[int]] = [[] for _ in prompts]
    for step in generated_steps(model, prompts, max_new_tokens, temperature, top_k, seed, stop_token, deadline):
        for row, token in step:
            if token != stop_token:
                out[row].append(token)
    return out


def generate_texts(
    model: GPT,
    tokenizer,
    prompts: list[str],
    sampling: Sampling = Sampling(),
) -> list[str]:
    """One completion per prompt (the prompt itself excluded), stopping at end-of-text."""
    eot = tokenizer.token_to_id(EOT)
    encoded = [tokenizer.encode(str(prompt)).ids or [eot] for prompt in prompts]
    s = sampling
    generated = generate_ids(model, encoded, s.max_new_tokens, s.temperature, s.top_k, s.seed, eot, s.deadline)
    return [tokenizer.decode(ids) for ids in generated]


def prompt_ids(model: GPT, tokenizer, template, messages: list[dict]) -> list[int]:
    """The token ids generation continues from for a chat; a `ValueError` when the template cannot render the chat
    or the context cannot hold it with room for one token. The context bounds the work too: a chat is refused from
    its count of turns before any is encoded (each takes 2 tokens or more: its marker and the end marker), else
    encoded turn by turn and refused at the first turn that passes the context, the rest never encoded."""
    context = model.config.block_size
    if 2 * len(messages) + 1 >= context:
        raise ValueError(
            f"the conversation's {len(messages)} turns take {2 * len(messages) + 1} tokens or more; "
            f"the context holds {context}"
        )
    ids: list[int] = []
    for turn, message in enumerate(messages):
        ids += template.encode(tokenizer, [message])[0]  # each turn is encoded on its own: the same ids
        if len(ids) + 1 >= context:
            raise ValueError(
                f"the conversation is {len(ids) + 1} tokens or more by turn {turn} of {len(messages)}; "
                f"the context holds {context}"
            )
    return ids + [template.token_id(tokenizer, template.assistant)]


def generate_replies(
    model: GPT,
    tokenizer,
    template,
    conversations: list[list[dict]],
    sampling: Sampling = Sampling(),
) -> list[str]:
    """The assistant's next reply to each conversation, rendered through the chat template (`models.chat`);
    generation stops at the template's end marker. `top_k=1` is greedy decoding."""
    end = template.token_id(tokenizer, template.end)
    encoded = [prompt_ids(model, tokenizer, template, messages) for messages in conversations]
    s = sampling
    generated = generate_ids(model, encoded, s.max_new_tokens, s.temperature, s.top_k, s.seed, end, s.deadline)
    return [template.decode_reply(tokenizer, ids) for ids in generated]
