"""`foundry evaluate`'s baselines per group of source files on documents: each group's holdout text scored apart,
beside each model's figures on that group. A document's group is the top-level folder of its file's name in the
source (`group_of`; with several sources, the source's index).

Unigram (the train split's token frequencies under the data's tokenizer), gzip and PPMd order 16 are scored per
group, each given the same training text as the overall baseline (`compressors.baselines_by_holdout`); xz -6,
xz -9e and zpaq only overall, since each group would cost a compression of their whole context again.
"""

from __future__ import annotations

import json
from pathlib import Path

from foundry.config import FoundryConfig

GROUP_BASELINES = ("unigram", "gzip", "ppmd")  # in the order the group table shows them
TOP_LEVEL = "(top level)"  # the group of files at the root of the source


def group_of(source_name: str) -> str:
    """A document's group: the top-level folder of its file's name within the source."""
    head, sep, _ = source_name.partition("/")
    return head if sep else TOP_LEVEL


def holdout_by_group(data_dir: Path) -> dict[str, list[str]]:
    """The holdout's documents by group, in order of first appearance, each group's in corpus order."""
    groups: dict[str, list[str]] = {}
    with open(data_dir / "holdout.jsonl", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            groups.setdefault(group_of(record.get("source", "")), []).append(record["text"])
    return groups


def unigram_by_group(data_dir: Path, vocab_size: int, texts: dict[str, list[str]]) -> dict[str, float]:
    """The unigram baseline on each group's documents, read as the shards hold them (tokens, then end-of-text)."""
    from tokenizers import Tokenizer

    from foundry.data.manifest import TOKENIZER
    from foundry.pretrain.holdout_metrics import LN2, unigram_log_p
    from models.tokens import EOT

    log_p = unigram_log_p(data_dir, vocab_size)
    tokenizer = Tokenizer.from_file(str(data_dir / TOKENIZER))
    tokenizer.encode_special_tokens = True  # a document's own `<|endoftext|>` is text, as in the shards
    eot = tokenizer.token_to_id(EOT)
    found = {}
    for group, documents in texts.items():
        nats = sum(-log_p[[*tokenizer.encode(text).ids, eot]].sum() for text in documents)
        found[group] = float(nats / LN2 / sum(len(text.encode()) for text in documents))
    return found


def group_baselines(data_dir: Path, config: FoundryConfig, overall: dict[str, float]) -> dict[str, dict[str, float]]:
    """`GROUP_BASELINES` by group (groups without text left out); one group is the whole holdout: `overall`'s."""
    from foundry.data.manifest import DatasetManifest
    from foundry.pretrain.compressors import baselines_by_holdout

    texts = {group: documents for group, documents in holdout_by_group(data_dir).items() if "".join(documents)}
    if len(texts) == 1:
        return {group: {name: overall[name] for name in GROUP_BASELINES} for group in texts}
    e = config.evaluation
    holdouts = {group: "".join(documents).encode() for group, documents in texts.items()}
    compressed = baselines_by_holdout(data_dir, holdouts, e.compression_context_bytes, e.strong_context_bytes)
    unigram = unigram_by_group(data_dir, DatasetManifest.read(data_dir).vocab_size, texts)
    return {group: {"unigram": unigram[group], **compressed[group]} for group in texts}
