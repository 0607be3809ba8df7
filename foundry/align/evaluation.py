"""Stage E for alignment: what the model does with held-out conversations and preferences, beside the base.

- response loss: nats per assistant token on held-out conversations (prompts, system and user turns
  excluded), or on the chosen replies of held-out pairs;
- preference accuracy: the share of held-out pairs whose chosen reply gets a higher summed log-probability
  than the rejected one (ties count as failures), and the mean margin between the two;
- exact match: greedy replies, through the chat template, compared with the expected answer;
- the base's pretraining holdout in bits per byte, where forgetting shows.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import torch

from foundry.align.records import load_conversations, load_pairs
from foundry.data.manifest import DatasetManifest
from models.align import IGNORE, sequence_logps
from models.align_data import Conversations, Pairs, Ragged, sequential_conversations, sequential_pairs
from models.chat import ChatTemplate
from models.gpt import GPT


@torch.no_grad()
def response_loss(model: GPT, data: Conversations, batch_size: int, pad_id: int) -> float:
    """Mean nats per trained (assistant) token over every conversation."""
    model.eval()
    nats, count = 0.0, 0
    for x, y, segments in sequential_conversations(data, model.config.block_size, batch_size, pad_id):
        loss = model.masked_loss(x, y, segments)
        n = int((y != IGNORE).sum())
        nats, count = nats + loss.item() * n, count + n
    return nats / max(count, 1)


@torch.no_grad()
def preference_scores(model: GPT, data: Pairs, batch_size: int, pad_id: int) -> dict[str, float]:
    """Accuracy (chosen strictly above rejected), mean log-probability margin, and the chosen replies' loss."""
    model.eval()
    wins, margins, nats, tokens, pairs = 0, 0.0, 0.0, 0, 0
    for x, y in sequential_pairs(data, batch_size, pad_id):
        logits, _ = model(x)
        logps = sequence_logps(logits, y)
        half = x.size(0) // 2
        chosen, rejected = logps[:half], logps[half:]
        wins += int((chosen > rejected).sum())
        margins += float((chosen - rejected).sum())
        nats -= float(chosen.sum())
        tokens += int((y[:half] != IGNORE).sum())
        pairs += half
    return {"preference_accuracy": wins / pairs, "preference_margin": margins / pairs, "response_loss": nats / tokens}


def heldout_scores(model: GPT, data_dir: Path, manifest: DatasetManifest, batch_size: int) -> dict[str, float]:
    """The held-out split's scores for a chat (SFT) or preference (DPO) dataset."""
    pad = manifest.eot_id
    if manifest.kind == "chat":
        return {"response_loss": response_loss(model, load_conversations(data_dir, "holdout"), batch_size, pad)}
    return preference_scores(model, load_pairs(data_dir, "holdout"), batch_size, pad)


def pairs_from_examples(examples: list[dict], tokenizer, template: ChatTemplate) -> Pairs:
    """`{"prompt", "chosen", "rejected"}` examples as token arrays, through the template."""
    prompts = [template.encode_prompt(tokenizer, [{"role": "user", "content": e["prompt"]}]) for e in examples]
    chosen = [template.encode_reply(tokenizer, e["chosen"]) for e in examples]
    rejected = [template.encode_reply(tokenizer, e["rejected"]) for e in examples]
    return Pairs(Ragged.from_lists(prompts), Ragged.from_lists(chosen), Ragged.from_lists(rejected))


@torch.no_grad()
def greedy_replies(
    model: GPT, tokenizer, template: ChatTemplate, conversations: list[list[dict]], max_new_tokens: int, batch: int = 64
) -> list[str]:
    """The greedy reply to each conversation through the template, up to its end marker. Prompts of the same
    length are decoded together: no padding, so each row is computed as it would be alone."""
    end = template.token_id(tokenizer, template.end)
    encoded = [template.encode_prompt(tokenizer, messages) for messages in conversations]
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, ids in enumerate(encoded):
        by_length[len(ids)].append(i)
    model.eval()
    replies = [""] * len(encoded)
    for length, indices in by_length.items():
        for start in range(0, len(indices), batch):
            rows = indices[start : start + batch]
            idx, done = torch.tensor([encoded[i] for i in rows]), torch.zeros(len(rows), dtype=torch.bool)
            for _ in range(max_new_tokens):
                logits, _ = model(idx[:, -model.config.block_size :])
                next_ids = logits[:, -1, :].argmax(dim=-1)
                idx, done = torch.cat((idx, next_ids[:, None]), dim=1), done | (next_ids == end)
                if bool(done.all()):
                    break
            for i, row in zip(rows, idx[:, length:].tolist()):
                replies[i] = template.decode_reply(tokenizer, row[: row.index(end)] if end in row else row)
    return replies


def exact_match(
    model: GPT, tokenizer, template: ChatTemplate, examples: list[dict], max_new_tokens: int = 32
) -> dict[str, float]:
    """Per task, the share of `{"task", "prompt", "answer"}` examples whose greedy reply is the answer exactly
    (surrounding whitespace aside)."""
    chats = [[{"role": "user", "content": e["prompt"]}] for e in examples]
    replies = greedy_replies(model, tokenizer, template, chats, max_new_tokens)
    hits: dict[str, list[bool]] = defaultdict(list)
    for example, reply in zip(examples, replies):
        hits[example["task"]].append(reply.strip() == example["answer"])
    return {task: sum(h) / len(h) for task, h in hits.items()}
