"""Text generation with a trained model and its tokenizer, seeded so the same prompt gives the same text."""

from __future__ import annotations

import torch

from models.gpt import GPT
from models.request_limits import DEFAULTS
from models.tokens import EOT


def generate_texts(
    model: GPT,
    tokenizer,
    prompts: list[str],
    max_new_tokens: int = DEFAULTS["max_new_tokens"],
    temperature: float = DEFAULTS["temperature"],
    top_k: int | None = DEFAULTS["top_k"],
    seed: int = DEFAULTS["seed"],
) -> list[str]:
    """One completion per prompt (the prompt itself excluded), stopping at end-of-text."""
    eot = tokenizer.token_to_id(EOT)
    completions = []
    for prompt in prompts:
        ids = tokenizer.encode(str(prompt)).ids or [eot]
        generator = torch.Generator().manual_seed(seed)
        out = model.generate(
            torch.tensor([ids]), max_new_tokens, temperature, top_k, generator=generator, stop_token=eot
        )
        completions.append(tokenizer.decode([i for i in out[0, len(ids) :].tolist() if i != eot]))
    return completions


def generate_replies(
    model: GPT,
    tokenizer,
    template,
    conversations: list[list[dict]],
    max_new_tokens: int = DEFAULTS["max_new_tokens"],
    temperature: float = DEFAULTS["temperature"],
    top_k: int | None = DEFAULTS["top_k"],
    seed: int = DEFAULTS["seed"],
) -> list[str]:
    """The assistant's next reply to each conversation, rendered through the chat template (`models.chat`);
    generation stops at the template's end marker. `top_k=1` is greedy decoding."""
    end = template.token_id(tokenizer, template.end)
    replies = []
    for messages in conversations:
        ids = template.encode_prompt(tokenizer, messages)
        if len(ids) >= model.config.block_size:
            raise ValueError(f"the conversation is {len(ids)} tokens; the context holds {model.config.block_size}")
        generator = torch.Generator().manual_seed(seed)
        out = model.generate(
            torch.tensor([ids]), max_new_tokens, temperature, top_k, generator=generator, stop_token=end
        )
        replies.append(template.decode_reply(tokenizer, [i for i in out[0, len(ids) :].tolist() if i != end]))
    return replies
