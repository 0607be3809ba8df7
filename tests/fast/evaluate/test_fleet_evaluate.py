"""`foundry evaluate`'s logic (foundry/evaluate/) against the session's embedded MLflow registry: tiny
random-weight models registered through Foundry's own functions (no training), a source in a temporary folder and
the tiny data version. A uniform model (all logits 0) makes every figure exact: ln V nats a token."""

from __future__ import annotations

import math

import pytest
from conftest import REPO_ROOT, failing_mlflow_server
from helpers_evaluate import random_model_files, register_files, word_soup_source
from helpers_hostile import files_under
from helpers_tokenizers import plain_tokenizer

from foundry.config import load_config
from foundry.evaluate import report
from foundry.evaluate.scores import resolve_models, source_config
from foundry.evaluate.steps import evaluate_all
from foundry.evaluation.compressors import compression_baselines
from foundry.evaluation.metrics import holdout_metrics
from foundry.pretrain.group_baselines import TOP_LEVEL
from foundry.pretrain.report import DIFFERENT_TOKENIZERS
from foundry.runtime import tracking
from models.gpt import load_gpt

pytestmark = pytest.mark.usefixtures("home")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Documents in two top-level folders and at the root of the source."""
    return word_soup_source(tmp_path_factory.mktemp("evaluate-source") / "tickets")


def small(*overrides: str):
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", ["evaluation.batch_size=4", *overrides])


def test_two_tokenizers_on_a_source_scored_per_group_linked_to_each_version(tiny_dataset, source, home):
    from tokenizers import Tokenizer

    config = small("data.holdout_fraction=0.3", "evaluation.strong_context_bytes=4096")
    data_tokenizer = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json"))
    uniform = register_files(config, "eval-uniform", random_model_files(config, data_tokenizer, home / "uniform", 0.0))
    other = register_files(config, "eval-other", random_model_files(config, plain_tokenizer(), home / "other", 1.0))
    before = files_under(source)
    refs = resolve_models(["models:/eval-uniform@champion", other])
    config = source_config(config, str(source))
    with tracking.pipeline_run(config, "evaluate test", {"foundry.stage": "evaluate"}) as run:
        evaluation = evaluate_all(refs, str(source), config, run)

    first, second = evaluation.models
    assert (first.model.model, first.model.asked, second.model.model) == (uniform, refs[0].asked, other)
    vocab = data_tokenizer.get_vocab_size()
    assert first.metrics.loss == pytest.approx(math.log(vocab), abs=1e-4)
    assert set(evaluation.groups) == {"alpha", "beta", TOP_LEVEL}
    assert sum(g.bytes for g in first.groups.values()) == evaluation.holdout_bytes
    for g in first.groups.values():  # every token of the group scored, at ln V nats each
        assert g.loss == pytest.approx(math.log(vocab), abs=1e-4)
        assert g.bits_per_byte == pytest.approx(g.tokens * math.log(vocab) / math.log(2) / g.bytes, rel=1e-5)
    assert set(evaluation.baselines.scores) == {"unigram", "gzip", "xz", "xz9e", "ppmd"}

    # Different tokenizers: bits per byte only.
    text = report.comparison(evaluation)
    assert not evaluation.one_tokenizer and DIFFERENT_TOKENIZERS in text
    assert "| model | bits_per_byte | tokens |" in text and f"{uniform} (models:/eval-uniform@champion)" in text

    # No split ledger changed: nothing versioned, nothing hydrated, the staging folder gone, the source as it was.
    assert not (home / "workspace").exists() and not (home / "hydrated").exists()
    assert not (run.dir / "prepared").exists() and files_under(source) == before

    c = tracking.client()
    for scores in evaluation.models:
        child = c.get_run(scores.run_id)
        tags = child.data.tags
        assert (tags["mlflow.parentRunId"], tags["foundry.evaluates"]) == (evaluation.run_id, scores.model.model)
        assert (tags["foundry.model_uri"], tags["data.source_digest"]) == (
            scores.model.asked,
            evaluation.data.source_digest,
        )
        (dataset,) = child.inputs.dataset_inputs
        assert dataset.dataset.name == evaluation.data.name
        assert {t.key: t.value for t in dataset.tags}["mlflow.data.context"] == "evaluation"
        assert [m.model_id for m in child.inputs.model_inputs] == [scores.model.model_id]
        linked = {m.key: m for m in c.get_logged_model(scores.model.model_id).metrics}
        assert linked["eval/bits_per_byte"].value == pytest.approx(scores.metrics.bits_per_byte)
        assert linked["eval/bits_per_byte"].dataset_name == evaluation.data.name
        assert "eval/group/alpha/bits_per_byte" in linked
    logged = {a.path for a in c.list_artifacts(evaluation.run_id, "evaluation")}
    assert logged == {"evaluation/comparison.md", "evaluation/evaluation.png"}


def test_a_data_version_is_hydrated_and_scored_as_registration_scores_it(tiny_dataset, versioned, home):
    from tokenizers import Tokenizer

    data, _ = versioned
    config = small(f"data.remote={data.remote}", "evaluation.strong_context_bytes=4096")
    files = random_model_files(config, Tokenizer.from_file(str(tiny_dataset / "tokenizer.json")), home / "m", 1.0)
    model = register_files(config, "eval-versioned", files)
    with tracking.pipeline_run(config, "evaluate test", {"foundry.stage": "evaluate"}) as run:
        evaluation = evaluate_all(resolve_models([model]), data.data_version, config, run)

    e = config.evaluation
    (scores,) = evaluation.models
    recorded = holdout_metrics(load_gpt(files[0]), files[1], tiny_dataset, e.batch_size, e.max_tokens, e.window_overlap)
    assert (evaluation.data.data_version, evaluation.data.dir) == (
        data.data_version,
        home / "hydrated" / data.data_version,
    )
    assert scores.metrics.bits_per_byte == pytest.approx(recorded.bits_per_byte, rel=1e-6)
    expected = compression_baselines(tiny_dataset, e.compression_context_bytes, e.strong_context_bytes)
    assert evaluation.baselines.scores["ppmd"] == pytest.approx(expected["ppmd_bits_per_byte"])
    assert evaluation.baselines.scores["unigram"] == pytest.approx(recorded.unigram_bits_per_byte)
    text = report.comparison(evaluation)
    assert "| model | bits_per_byte | loss | perplexity | tokens |" in text  # one tokenizer: loss compares
    linked = {m.key: m for m in tracking.client().get_logged_model(scores.model.model_id).metrics}
    assert linked["eval/bits_per_byte"].dataset_digest == data.data_version


def test_a_missing_version_is_an_error_not_nothing_to_evaluate(tiny_dataset, home):
    from tokenizers import Tokenizer

    config = small()
    files = random_model_files(config, Tokenizer.from_file(str(tiny_dataset / "tokenizer.json")), home / "m", 0.0)
    register_files(config, "eval-missing", files)
    with pytest.raises(LookupError, match=r"models:/eval-missing/99: the registry has no such version"):
        resolve_models(["models:/eval-missing/1", "models:/eval-missing/99"])
    with pytest.raises(LookupError, match=r"models:/never-registered@champion: the registry has no such"):
        resolve_models(["models:/never-registered@champion"])


def test_a_registry_that_does_not_answer_stops_the_evaluation(monkeypatch):
    from mlflow.exceptions import MlflowException

    with failing_mlflow_server(monkeypatch, "MLFLOW_TRACKING_URI"), pytest.raises(MlflowException):
        resolve_models(["models:/foundry-gpt@champion"])


def test_the_cli_refuses_a_malformed_model_uri_before_any_work(capsys):
    from foundry.cli import main

    assert main(["evaluate", "foundry-gpt/3", "--data", "stdlib://email"]) == 2
    assert "models:/NAME/VERSION" in capsys.readouterr().err


# --- chat records (exact match of aligned versions) ---------------------------------------------

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


def test_an_archive_served_over_http_is_prepared_and_scored_as_one_group(tiny_dataset, source, home, http_folder):
    """`--data URL`: a tar.gz served over http, its documents grouped under the archive, scored at ln V nats."""
    import tarfile

    from tokenizers import Tokenizer

    config = small("data.holdout_fraction=0.3", "evaluation.strong_context_bytes=4096")
    tokenizer = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json"))
    model = register_files(config, "eval-http", random_model_files(config, tokenizer, home / "m", 0.0))
    folder, url = http_folder
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / "tickets.tar.gz", "w:gz") as archive:
        archive.add(source, arcname="tickets")
    config = source_config(config, f"{url}/tickets.tar.gz")
    with tracking.pipeline_run(config, "evaluate an archive", {"foundry.stage": "evaluate"}) as run:
        evaluation = evaluate_all(resolve_models([model]), f"{url}/tickets.tar.gz", config, run)
    (scores,) = evaluation.models
    assert scores.metrics.loss == pytest.approx(math.log(tokenizer.get_vocab_size()), abs=1e-4)
    assert set(evaluation.groups) == {"tickets"}
    assert scores.groups["tickets"].bytes == evaluation.holdout_bytes > 0
    assert evaluation.baselines.groups["tickets"]["ppmd"] == evaluation.baselines.scores["ppmd"]  # one group: all


def test_each_groups_baselines_are_the_compressors_on_its_holdout_alone_shown_beside_the_models(
    tiny_dataset, source, home
):
    """gzip and PPMd per group equal `compression_baselines` on a copy of the data whose holdout is that group's
    documents alone, with the same training text; the unigram per group adds up to the overall one; the group
    table and the MLflow runs (the evaluation's and each model's) carry them."""
    import json
    import os

    from tokenizers import Tokenizer

    from foundry.core.metrics.holdout import HoldoutMetrics
    from foundry.evaluate import steps
    from foundry.evaluate.scores import downloaded
    from foundry.pretrain.group_baselines import GROUP_BASELINES, group_of

    config = small("data.holdout_fraction=0.3", "evaluation.strong_context_bytes=4096")
    tokenizer = Tokenizer.from_file(str(tiny_dataset / "tokenizer.json"))
    model = register_files(config, "eval-groups", random_model_files(config, tokenizer, home / "m", 0.0))
    config = source_config(config, str(source))
    e = config.evaluation
    with tracking.pipeline_run(config, "evaluate per group", {"foundry.stage": "evaluate"}) as run:
        refs = [downloaded(ref, run.home) for ref in resolve_models([model])]
        data = steps.data_for(str(source), config, refs, run)
        base = steps.baselines(data, config)
        records = [json.loads(line) for line in (data.dir / "holdout.jsonl").read_text().splitlines()]
        direct, sizes = {}, {}
        for group in ("alpha", "beta", TOP_LEVEL):  # the group's holdout alone, beside the same train split
            alone = home / "alone" / group.strip("()").replace(" ", "-")
            alone.mkdir(parents=True)
            os.symlink(data.dir / "train.jsonl", alone / "train.jsonl")
            mine = [r for r in records if group_of(r["source"]) == group]
            (alone / "holdout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mine))
            direct[group] = compression_baselines(alone, e.compression_context_bytes, e.strong_context_bytes)
            sizes[group] = sum(len(r["text"].encode()) for r in mine)
        scores = [steps.scored_and_logged(ref, data, base, config, run) for ref in refs]
        evaluation = steps.compared(data, base, scores, run)

    assert set(base.groups) == {"alpha", "beta", TOP_LEVEL} and min(sizes.values()) > 0
    for group, found in direct.items():
        assert base.groups[group]["gzip"] == pytest.approx(found["gzip_bits_per_byte"], rel=1e-12)
        assert base.groups[group]["ppmd"] == pytest.approx(found["ppmd_bits_per_byte"], rel=1e-12)
    assert base.groups["alpha"]["ppmd"] != base.scores["ppmd"]  # scored on the group, not the whole holdout
    unigram_bits = sum(base.groups[g]["unigram"] * sizes[g] for g in sizes)
    assert unigram_bits == pytest.approx(base.scores["unigram"] * evaluation.holdout_bytes, rel=1e-9)

    text = report.comparison(evaluation)
    labels = [f"baseline: {HoldoutMetrics.LABELS[name]}" for name in GROUP_BASELINES]
    assert f"| group | bytes | {model} | {' | '.join(labels)} |" in text
    for group, found in base.groups.items():
        row = [f"{scores[0].groups[group].bits_per_byte:.4f}", *(f"{found[n]:.4f}" for n in GROUP_BASELINES)]
        assert f"| {group} | {sizes[group]:,} | {' | '.join(row)} |" in text

    c = tracking.client()
    for run_id in (evaluation.run_id, scores[0].run_id):
        logged = c.get_run(run_id).data.metrics
        assert logged["eval/group/beta/baseline/ppmd_bits_per_byte"] == pytest.approx(base.groups["beta"]["ppmd"])
        assert logged["eval/baseline/ppmd_bits_per_byte"] == pytest.approx(base.scores["ppmd"])
