"""`foundry evaluate` on chat records: exact match of each aligned model's greedy replies, and its response loss;
reported as a table of both (no chart, no baselines: exact match has no compressor to compare with).

The data is an alignment data version of chat records, or a source whose `.jsonl` records are conversations
(`holds_chats`): that one is prepared by the align flow's own `prepare_aligned` (its checks, scrubbing,
de-duplication and prompt-hash holdout) on this `$FOUNDRY_HOME`'s chat split ledger, read only: a prompt an alignment
here trained on stays out of the holdout, one it held out stays in. With the first aligned model's tokenizer and
context.

Each holdout conversation's last assistant turn is the reference; the messages before it are the prompt. A model
with a chat template (an aligned version) replies greedily through it (`models.generate.generate_replies`, top-k 1,
up to `align.max_new_tokens` tokens, as the align flow's replies are generated); a reply that equals the reference
(surrounding whitespace aside) counts. Its response loss is nats per assistant token of the conversations encoded
with its own tokenizer (`foundry.align.evaluation.response_loss`): it compares across models of one tokenizer only.
A conversation that does not fit a model's context is not scored for it (`records` counts those that were). A model
without a chat template has no way to read a conversation: it is reported as not comparable, the others scored.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from foundry.align.fields import ChatScores
from foundry.config import FoundryConfig, variants
from foundry.core import run_tags
from foundry.core.contracts import SourceManifest
from foundry.core.redact import redact_url
from foundry.evaluate.report import best, head, name_of, runs_lines
from foundry.evaluate.runs import metric_key
from foundry.evaluate.scores import Baselines, Evaluation, EvaluationData, ModelRef, ModelScores, described
from foundry.evaluate.scoring import Scoring, Source
from foundry.pretrain.scoring import is_language_model

CHAT_LOSS = (
    "Exact match: greedy replies through each model's chat template equal to the holdout's reference reply. "
    "Response loss is per assistant token of each model's own tokenizer."
)
NO_TEMPLATE = "not comparable: no chat template (not an aligned version), so it cannot read a conversation"


@dataclass(frozen=True)
class HeldChat:
    prompt: list[dict]  # the messages before the reference
    reference: str  # the last assistant turn
    messages: list[dict]  # the whole conversation (its response loss)


def holds_chats(source: SourceManifest, config: FoundryConfig) -> bool:
    """Whether the source is chat records: every file `.jsonl`, the first record a conversation (`messages`,
    prompt/response or prompt/completion). Preference records are refused: not implemented."""
    from foundry.align.records import SHAPES_OF, RecordProblem, shape_of
    from foundry.data.formats import base_name, read_records

    if not source.entries or not all(base_name(e.name).endswith(".jsonl") for e in source.entries):
        return False
    first = source.entries[0]
    record = next(read_records(first.path, first.name, config.data, lambda *_: None), (None, ""))[0]
    try:
        shape = shape_of(record) if isinstance(record, dict) else ""
    except RecordProblem:
        return False
    if shape in SHAPES_OF["dpo"]:
        raise ValueError(f"{first.name} holds preference records: `foundry evaluate` does not score them")
    return shape in SHAPES_OF["sft"]


def saved_of(ref: ModelRef) -> dict:
    from models.gpt import load_saved

    if ref.artifacts is None:
        raise ValueError(f"{ref.model}: download its files first (`downloaded`)")
    return load_saved(ref.artifacts / "model.pt")


def prepared_chats(
    source: SourceManifest, config: FoundryConfig, refs: list[ModelRef], out_dir: Path, ledger: Path | None
) -> EvaluationData:
    """The source's conversations prepared into `out_dir` with the first aligned model's tokenizer and context,
    on the split ledger in `ledger` (`split_ledger.head`: only read; None, none), never versioned."""
    from foundry.align.prepare import prepare_aligned

    first = next(((ref, saved) for ref in refs if (saved := saved_of(ref)).get("chat_template")), None)
    if first is None:
        raise ValueError(
            f"{redact_url(config.data.source)} holds chat records and none of the models has a chat template: "
            "exact match needs an aligned version (`foundry align`)"
        )
    ref, saved = first
    read = variants.preparing_chats_for(config, ref.artifacts / "tokenizer.json", saved["model_args"]["block_size"])
    prepare_aligned(source, read, out_dir, ledger=ledger)
    return described(redact_url(config.data.source), out_dir, None, None)


def holdout_chats(data_dir: Path) -> list[HeldChat]:
    """Each holdout conversation split at its last assistant turn, in the holdout's order."""
    from foundry.align.records import from_kept

    chats = []
    with open(data_dir / "holdout.jsonl", encoding="utf-8") as fh:
        for line in fh:
            messages = from_kept(json.loads(line)).as_messages()
            last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
            chats.append(HeldChat(messages[:last], messages[last]["content"], messages[: last + 1]))
    return chats


def score_chats(ref: ModelRef, data_dir: Path, config: FoundryConfig) -> ModelScores:
    """The model's exact match and response loss on the holdout's conversations, or not comparable."""
    from tokenizers import Tokenizer

    from models.chat import saved_template
    from models.gpt import gpt_from_saved
    from models.tokens import text_only

    saved, tokenizer_path = saved_of(ref), ref.artifacts / "tokenizer.json"
    digest = hashlib.sha256(tokenizer_path.read_bytes()).hexdigest()[:12]
    template = saved_template(saved)
    if template is None:
        return ModelScores(
            model=ref,
            tokenizer=digest,
            chat=ChatScores(exact_match=None, response_loss=None, records=0, note=NO_TEMPLATE),
        )
    model, tokenizer = gpt_from_saved(saved), text_only(Tokenizer.from_file(str(tokenizer_path)))  # as prepared
    block = model.config.block_size
    fits = [c for c in holdout_chats(data_dir) if len(template.encode_prompt(tokenizer, c.prompt)) < block]
    if not fits:
        note = f"not comparable: no holdout conversation's prompt fits its context of {block} tokens"
        return ModelScores(
            model=ref, tokenizer=digest, chat=ChatScores(exact_match=None, response_loss=None, records=0, note=note)
        )
    hits = exact_matches(model, tokenizer, template, fits, config.align.max_new_tokens)
    loss = chat_loss(model, tokenizer, template, fits, config.evaluation.batch_size)
    scores = ChatScores(exact_match=sum(hits) / len(fits), response_loss=loss, records=len(fits))
    return ModelScores(model=ref, tokenizer=digest, chat=scores)


def exact_matches(model, tokenizer, template, chats: list[HeldChat], max_new_tokens: int) -> list[bool]:
    """Whether each greedy reply is its reference, surrounding whitespace aside."""
    from models.generate import Sampling, generate_replies

    replies = generate_replies(model, tokenizer, template, [c.prompt for c in chats], Sampling(max_new_tokens, top_k=1))
    return [reply.strip() == c.reference.strip() for reply, c in zip(replies, chats, strict=True)]


def chat_loss(model, tokenizer, template, chats: list[HeldChat], batch_size: int) -> float | None:
    """Nats per assistant token of the conversations that fit the context whole, under the model's tokenizer."""
    from foundry.align.evaluation import response_loss
    from models.align_data import Conversations, Ragged
    from models.tokens import EOT

    encoded = [template.encode(tokenizer, c.messages) for c in chats]
    whole = [(ids, trained) for ids, trained in encoded if len(ids) <= model.config.block_size]
    if not whole:
        return None
    data = Conversations(Ragged.from_lists([i for i, _ in whole]), Ragged.from_lists([t for _, t in whole]))
    return response_loss(model, data, batch_size, tokenizer.token_to_id(EOT))


# --- the report: exact match, best first; models not comparable last ------------------------------


def scored(evaluation: Evaluation) -> list[ModelScores]:
    return [m for m in evaluation.models if m.chat and m.chat.exact_match is not None]


def rows(evaluation: Evaluation) -> list[dict[str, str]]:
    """One row per model, the best exact match first, models that are not comparable last with the reason."""
    compared = scored(evaluation)
    table = []
    for m in sorted(compared, key=lambda m: -m.chat.exact_match):
        loss = "" if m.chat.response_loss is None else f"{m.chat.response_loss:.4f}"
        table.append({"model": name_of(m), "exact_match": f"{m.chat.exact_match:.4f}", "response_loss": loss})
        table[-1] |= {"records": f"{m.chat.records:,}", "note": ""}
    for m in evaluation.models:
        if m not in compared:
            note = m.chat.note if m.chat else ""
            table.append({"model": name_of(m), "exact_match": "", "response_loss": "", "records": "", "note": note})
    return table


class ChatScoring(Scoring):
    figure = "Exact match"
    holding = "text"
    records = ("chat",)  # preference pairs are not scored: not implemented
    others = "image classifiers"
    elsewhere = "an image data version, an image folder or sklearn://digits"

    def prepared(self, source: Source) -> EvaluationData | None:
        """Chat records, with the first aligned model's tokenizer, on this home's chat split ledger (only read:
        the alignments' splits here, so what they trained on is not held out)."""
        from foundry.align import split_ledger

        if not holds_chats(source.acquired, source.config):
            return None
        ledger = split_ledger.head(source.run.home)
        return prepared_chats(source.acquired, source.config, source.refs, source.staging, ledger)

    def reads(self, ref: ModelRef) -> bool:
        return is_language_model(ref)

    def baselines(self, data: EvaluationData, config: FoundryConfig) -> Baselines:
        """None: exact match has no compressor to compare with."""
        return Baselines(scores={}, train_bytes=0)

    def score(self, ref: ModelRef, data: EvaluationData, config: FoundryConfig, base: Baselines) -> ModelScores:
        return score_chats(ref, data.dir, config)

    def holdout(self, data: EvaluationData) -> tuple[int, int | None]:
        """The holdout file's bytes, and its conversations."""
        from foundry.data.manifest import DatasetManifest

        return (data.dir / "holdout.jsonl").stat().st_size, DatasetManifest.read(data.dir).stats["holdout_records"]

    def metrics(self, scores: ModelScores) -> dict[str, float]:
        """`eval/exact_match`, `eval/records` and `eval/response_loss`; none for a model not comparable."""
        c = scores.chat
        if c is None or c.exact_match is None:
            return {}
        found = {metric_key("exact_match"): c.exact_match, metric_key("records"): float(c.records)}
        return found | ({metric_key("response_loss"): c.response_loss} if c.response_loss is not None else {})

    def run_tags(self, scores: ModelScores) -> dict[str, str]:
        if scores.chat is not None and scores.chat.exact_match is None:
            return {run_tags.COMPARABLE: "false", run_tags.NOT_COMPARABLE: scores.chat.note}
        return {}

    def rows(self, evaluation: Evaluation) -> list[dict[str, str]]:
        return rows(evaluation)

    def comparison(self, evaluation: Evaluation) -> str:
        held = f"{evaluation.holdout_records:,} conversations"
        opening = head(evaluation, rows(evaluation), held, "chat records")
        return "\n".join([*opening, CHAT_LOSS, *runs_lines(evaluation)])

    def outcome(self, evaluation: Evaluation) -> str:
        if not (compared := scored(evaluation)):
            return "no model could be compared on chat records"
        return best(compared, lambda m: m.chat.exact_match, "exact match {:.4f}")

    def headline(self, scores: ModelScores) -> str:
        c = scores.chat
        return c.note if c.exact_match is None else f"exact match {c.exact_match:.4f} on {c.records} conversations"


SCORING = ChatScoring()
