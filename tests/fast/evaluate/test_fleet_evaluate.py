"""`foundry evaluate`'s logic (foundry/evaluate/) against the session's embedded MLflow registry: tiny
random-weight models registered through Foundry's own functions (no training) and the tiny data version: which
versions and data it resolves, and that a registry or an input error stops it. A uniform model (all logits 0) makes
every figure exact: ln V nats a token. Documents and chats are scored in tests/fast/pretrain/test_document_scoring.py
and tests/fast/align/test_chat_scoring.py."""

from __future__ import annotations

import pytest
from conftest import REPO_ROOT, failing_mlflow_server
from helpers_evaluate import random_model_files, register_files

from foundry.config import load_config
from foundry.evaluate import report
from foundry.evaluate.scores import resolve_models
from foundry.evaluate.steps import evaluate_all
from foundry.pretrain.compressors import compression_baselines
from foundry.pretrain.holdout_metrics import holdout_metrics
from foundry.runtime import tracking
from models.gpt import load_gpt

pytestmark = pytest.mark.usefixtures("home")


def small(*overrides: str):
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", ["evaluation.batch_size=4", *overrides])


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
    energy = tracking.client().get_run(run.run_id).data  # the scoring's, on the evaluation's run (#59)
    assert energy.metrics["energy/evaluate/joules"] > 0 and energy.tags["energy.evaluate.method"]


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
