"""Chat records scored by `foundry evaluate` (foundry/align/evaluation.py): exact match of aligned versions' greedy
replies, on the home's chat ledger, against the session's embedded MLflow registry with tiny random-weight models."""

from __future__ import annotations

import pytest
from conftest import REPO_ROOT
from helpers_evaluate import random_model_files, register_files
from helpers_hostile import files_under
from helpers_tokenizers import plain_tokenizer

from foundry.config import load_config
from foundry.evaluate import report
from foundry.evaluate.scores import resolve_models, source_config
from foundry.evaluate.steps import evaluate_all
from foundry.runtime import tracking
from models.gpt import load_gpt

pytestmark = pytest.mark.usefixtures("home")


def small(*overrides: str):
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", ["evaluation.batch_size=4", *overrides])


PROMPTS = ["add two and three", "river stone", "light five", "add four and four", "stone light", "two and three"]


@pytest.fixture(scope="module")
def chat_case(tmp_path_factory):
    """Two aligned random models of one chat tokenizer (`hit`, `other`), a plain one, and a source of chats whose
    reference replies are `hit`'s own (non-empty) greedy replies. The chat markers' embeddings are shrunk: with
    tied weights a random model otherwise repeats the assistant's marker, an empty reply."""
    import json

    import torch
    from tokenizers import Tokenizer

    from models.chat import ChatTemplate, add_chat_tokens
    from models.generate import Sampling, generate_replies
    from models.gpt import load_saved

    root, config = tmp_path_factory.mktemp("chat-case"), small("data.holdout_fraction=0.4", "align.max_new_tokens=6")
    tokenizer = plain_tokenizer()
    add_chat_tokens(tokenizer, ChatTemplate())
    files = {}
    markers = [tokenizer.token_to_id(m) for m in ChatTemplate().special_tokens]
    for name, scale in (("hit", 1.0), ("other", 0.5)):
        files[name] = random_model_files(config, tokenizer, root / name, scale)
        saved = load_saved(files[name][0])
        saved["state_dict"]["wte.weight"][markers] *= 0.05
        saved["state_dict"]["lm_head.weight"] = saved["state_dict"]["wte.weight"]
        torch.save({**saved, "chat_template": ChatTemplate().to_dict()}, files[name][0])
    files["plain"] = random_model_files(config, plain_tokenizer(), root / "plain", 1.0)
    chats = [[{"role": "user", "content": p}] for p in PROMPTS]
    tok = Tokenizer.from_file(str(files["hit"][1]))
    answers = generate_replies(load_gpt(files["hit"][0]), tok, ChatTemplate(), chats, Sampling(6, top_k=1))
    kept = [(c, a) for c, a in zip(chats, answers) if a.strip()]  # an empty reply is no record
    assert len(kept) >= 4
    source = root / "chats"
    source.mkdir()
    lines = [json.dumps({"messages": [*c, {"role": "assistant", "content": a}]}) for c, a in kept]
    (source / "chats.jsonl").write_text("\n".join(lines) + "\n")
    return config, files, source


def held_out(data_dir):
    import json

    with open(data_dir / "holdout.jsonl", encoding="utf-8") as fh:
        records = [json.loads(line)["messages"] for line in fh]
    return [(m[:-1], m[-1]["content"]) for m in records]


def test_exact_match_is_the_share_of_greedy_replies_equal_to_the_reference(chat_case, tmp_path):
    from tokenizers import Tokenizer

    from foundry.align.evaluation import heldout_scores
    from foundry.align.scoring import NO_TEMPLATE, prepared_chats, score_chats
    from foundry.data.acquire import acquire_source
    from foundry.data.manifest import DatasetManifest
    from foundry.evaluate.scores import ModelRef
    from models.chat import ChatTemplate
    from models.generate import Sampling, generate_replies

    config, files, source = chat_case
    config = source_config(config, str(source))

    def ref(name):
        return ModelRef(asked=name, model=f"models:/{name}/1", model_id=None, artifacts=files[name][0].parent)

    data_dir = tmp_path / "prepared"
    manifest = acquire_source(config.data, tmp_path / "source_manifest.json")
    prepared_chats(manifest, config, [ref("plain"), ref("hit")], data_dir, None)  # hit's tokenizer, no ledger
    chats = held_out(data_dir)
    hit, other, plain = (score_chats(ref(n), data_dir, config) for n in ("hit", "other", "plain"))
    assert (hit.chat.exact_match, hit.chat.records) == (1.0, len(chats))  # its own replies are the references
    tokenizer = Tokenizer.from_file(str(files["other"][1]))
    replies = generate_replies(
        load_gpt(files["other"][0]), tokenizer, ChatTemplate(), [p for p, _ in chats], Sampling(6, top_k=1)
    )
    expected = sum(r.strip() == a.strip() for r, (_, a) in zip(replies, chats)) / len(chats)
    assert other.chat.exact_match == pytest.approx(expected)
    held = heldout_scores(load_gpt(files["hit"][0]), data_dir, DatasetManifest.read(data_dir), 4)
    assert hit.chat.response_loss == pytest.approx(held["response_loss"], rel=1e-5)
    assert (plain.chat.exact_match, plain.chat.note) == (None, NO_TEMPLATE)


def test_a_chat_source_is_scored_per_aligned_version_and_a_plain_one_is_not_comparable(chat_case, home):
    from foundry.align.scoring import NO_TEMPLATE

    config, files, source = chat_case
    names = [register_files(config, f"chat-{n}", files[n]) for n in ("plain", "hit", "other")]
    before = files_under(source)
    config = source_config(config, str(source))
    with tracking.pipeline_run(config, "evaluate test", {"foundry.stage": "evaluate"}) as run:
        evaluation = evaluate_all(resolve_models(names), str(source), config, run)

    plain, hit, other = evaluation.models
    assert (evaluation.data.kind, hit.chat.exact_match, hit.chat.records) == ("chat", 1.0, evaluation.holdout_records)
    assert plain.chat.exact_match is None and other.chat.exact_match is not None
    text = report.comparison(evaluation)
    assert "| model | exact_match | response_loss | records | note |" in text
    assert f"| {plain.model.model} |  |  |  | {NO_TEMPLATE} |" in text
    assert not (run.dir / "prepared").exists() and files_under(source) == before
    assert not (home / "workspace").exists()  # no data version, no split ledger

    c = tracking.client()
    linked = {m.key: m for m in c.get_logged_model(hit.model.model_id).metrics}
    assert linked["eval/exact_match"].value == 1.0 and linked["eval/exact_match"].dataset_name == evaluation.data.name
    assert "eval/response_loss" in linked
    tags = c.get_run(plain.run_id).data.tags
    assert (tags["mlflow.parentRunId"], tags["foundry.comparable"]) == (evaluation.run_id, "false")
    assert not c.get_run(plain.run_id).data.metrics
    assert {a.path for a in c.list_artifacts(evaluation.run_id, "evaluation")} == {"evaluation/comparison.md"}


def test_a_chat_source_is_split_by_the_homes_chat_ledger_so_what_alignment_trained_on_is_not_held_out(chat_case, home):
    """The home's ledger lists every prompt of the source as trained but one: that one alone is held out, where the
    hash rule alone holds out 40% of them (`data.holdout_fraction`)."""
    import json

    from foundry.align import split_ledger
    from foundry.align.records import parse_record
    from models.chat import ChatTemplate

    config, files, source = chat_case
    names = [register_files(config, f"ledger-{n}", files[n]) for n in ("hit",)]
    lines = (source / "chats.jsonl").read_text().splitlines()
    asked = [split_ledger.identity(parse_record(json.loads(line), "sft", ChatTemplate())) for line in lines]
    rows = [(key, "holdout" if i == 0 else "train", f"chats.jsonl:{i + 1}") for i, key in enumerate(asked)]
    with split_ledger.locked(home):
        split_ledger.extend(home, rows, "an-earlier-alignment")
    config = source_config(config, str(source))
    with tracking.pipeline_run(config, "evaluate ledger test", {"foundry.stage": "evaluate"}) as run:
        evaluation = evaluate_all(resolve_models(names), str(source), config, run)
    (hit,) = evaluation.models
    assert evaluation.holdout_records == 1 and len(lines) >= 4
    assert hit.chat.records == 1 and hit.chat.exact_match == 1.0  # its own reply to the one held-out prompt
