"""lm-evaluation-harness itself scores a model served by `foundry serve-model` (issue #57 point 1): the `lm_eval`
command, `--model local-completions` against `/v1/completions` on loopback, runs the project's own multiple-choice
task (tests/fixtures/lm_eval/, a task YAML over local JSON lines), offline: requests sent as text, context lengths
counted by the version's own tokenizer from its `foundry export --format hf` folder. Every log-likelihood lm-eval
records (`--log_samples`) equals the model's own scoring of the same context and continuation within 1e-4, computed
here with the model itself, and the task's accuracy is what those scores imply. The `lm_eval` process tries to reach
nothing beyond loopback (tests/netaudit's hook in it). Tiny random-weight base model, no training."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers_registry import new_run
from helpers_serving import served, tiny_served_files
from tokenizers import Tokenizer

from foundry.config import load_config
from foundry.export.hf import write_hf
from foundry.serving.package import log_model
from models.gpt import gpt_from_saved, load_saved
from models.tokens import text_only

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "tests" / "fixtures" / "lm_eval"  # foundry_tiny_mc.yaml and the JSON lines it reads
TASK = "foundry_tiny_mc"
NETAUDIT = REPO / "tests" / "netaudit"  # sitecustomize.py: a process's attempts beyond loopback, logged
WEIGHTS_SEED = 5
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "NO_PROXY": "127.0.0.1,localhost",  # a proxy the developer set must not carry loopback requests away
    "no_proxy": "127.0.0.1,localhost",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tiny_served_files(tmp_path_factory.mktemp("lm-eval"), seed=WEIGHTS_SEED)


@pytest.fixture(scope="module")
def evaluated(files, tmp_path_factory):
    """`lm_eval` run against the tiny base version served on loopback; returns (its results JSON, its samples,
    its audit log of attempts beyond loopback)."""
    import mlflow

    root = tmp_path_factory.mktemp("lm-eval-run")
    saved = load_saved(files[2])
    tokenizer_dir = write_hf(saved, files[1], root / "hf")  # what `foundry export --format hf` writes
    limits = load_config(None, []).serving.model_dump()
    model = mlflow.pyfunc.load_model(log_model(new_run("lm-eval"), files[2], files[1], limits))
    audit, out = root / "audit.jsonl", root / "out"
    env = (
        os.environ
        | OFFLINE
        | {
            "HF_HOME": str(root / "hf-home"),  # the datasets cache of this run only
            "PYTHONPATH": os.pathsep.join([str(NETAUDIT), str(REPO), os.environ.get("PYTHONPATH", "")]),
            "FOUNDRY_NET_AUDIT": str(audit),
        }
    )
    with served(model, "models:/tiny-base/1") as url:
        command = lm_eval_command(url, tokenizer_dir, saved["model_args"]["block_size"], out)
        result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    [results] = out.rglob("results_*.json")
    [samples] = out.rglob(f"samples_{TASK}_*.jsonl")
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    return json.loads(results.read_text()), lines, [json.loads(line) for line in audit.read_text().splitlines()]


def lm_eval_command(url: str, tokenizer_dir: Path, block_size: int, out: Path) -> list[str]:
    """The command docs/serving.md shows, run from the repository root: `max_length` the context, so that a request
    (at most `max_length - 1` tokens) and the one token `echo` generates fit in it."""
    model_args = ",".join(
        [
            f"base_url={url}/v1/completions",
            "model=tiny",
            "tokenizer_backend=huggingface",
            f"tokenizer={tokenizer_dir}",
            "tokenized_requests=False",
            f"max_length={block_size}",
        ]
    )
    return [
        *(sys.executable, "-m", "lm_eval", "run", "--model", "local-completions", "--model_args", model_args),
        *("--tasks", TASK, "--include_path", str(TASKS.relative_to(REPO)), "--batch_size", "1"),
        *("--output_path", str(out), "--log_samples"),
    ]


class OwnScoring:
    """The tiny base version scored here with the model itself, not through the served code path."""

    def __init__(self, files):
        self.tokenizer = text_only(Tokenizer.from_file(str(files[1])))
        self.model = gpt_from_saved(load_saved(files[2]))

    def loglikelihood(self, context: str, continuation: str) -> float:
        """log P(continuation | context): the two encoded together and split where the context's own tokens end
        (as lm-eval splits them), a context's trailing spaces moved to the continuation."""
        stripped = context.rstrip()
        context, continuation = stripped, context[len(stripped) :] + continuation
        ids = self.tokenizer.encode(context + continuation).ids
        start = len(self.tokenizer.encode(context).ids)
        with torch.no_grad():
            logits, _ = self.model(torch.tensor([ids]))
        scores = F.log_softmax(logits[0].double(), dim=-1)
        return sum(float(scores[t - 1, ids[t]]) for t in range(start, len(ids)))

    def of(self, sample: dict) -> list[float]:
        """Each choice of one logged sample, scored for the (context, continuation) lm-eval asked about."""
        return [self.loglikelihood(args["arg_0"], args["arg_1"]) for args in sample["arguments"].values()]


@pytest.fixture(scope="module")
def own(files):
    return OwnScoring(files)


def recorded(sample: dict) -> list[float]:
    """The log-likelihood lm-eval recorded for each choice of one sample (`resps`: [[[value, is_greedy]], ...])."""
    return [float(resp[0][0]) for resp in sample["resps"]]


def test_lm_eval_log_likelihoods_are_the_models_own(evaluated, own):
    _, samples, _ = evaluated
    documents = [json.loads(line) for line in (TASKS / f"{TASK}.jsonl").read_text().splitlines()]
    assert sorted(sample["doc"]["context"] for sample in samples) == sorted(doc["context"] for doc in documents)
    for sample in samples:
        asked = [(args["arg_0"], args["arg_1"]) for args in sample["arguments"].values()]
        assert asked == [(sample["doc"]["context"], " " + choice) for choice in sample["doc"]["choices"]]
        got, want = recorded(sample), own.of(sample)
        assert all(math.isclose(g, w, abs_tol=1e-4) for g, w in zip(got, want, strict=True)), (sample["doc"], got, want)


def test_lm_eval_accuracy_is_what_the_scores_imply(evaluated, own):
    """Each document is right where the model's own likeliest choice is its answer; the task's `acc` is their share.
    Every document's likeliest choice leads by more than the 1e-4 tolerance, so no near tie decides it."""
    results, samples, _ = evaluated
    scores = [sorted(own.of(sample), reverse=True) for sample in samples]
    assert all(best - second > 1e-3 for best, second, *_ in scores), scores
    assert [sample["target"] for sample in samples] == [str(sample["doc"]["answer"]) for sample in samples]
    right = [own.of(sample).index(max(own.of(sample))) == sample["doc"]["answer"] for sample in samples]
    assert [sample["acc"] for sample in samples] == [float(r) for r in right]
    assert math.isclose(results["results"][TASK]["acc,none"], sum(right) / len(right))
    assert 0 < sum(right) < len(right)  # random weights: the scores decide, the task is neither all won nor all lost


def test_lm_eval_reaches_nothing_beyond_loopback(evaluated):
    """The `lm_eval` process and the one it starts (`pip list`, for the environment it records) only started."""
    _, _, audit = evaluated
    assert audit and "-m lm_eval run" in audit[0]["target"], audit
    assert {entry["event"] for entry in audit} == {"started"}, audit
