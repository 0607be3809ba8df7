"""zpaq -m4 and -m5 as baselines (#58): real compressions of a small text by difference, given the strong context;
the strongest named by `foundry evaluate`'s comparison; a missing `zpaq` package gives absent baselines, never a
score (in a subprocess that hides the module). How the card and the run summary name them:
tests/fast/reports/test_cards.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from synthetic import synthetic_docs

from foundry.evaluate.scores import Baselines, Evaluation, EvaluationData, ModelRef, ModelScores
from foundry.pretrain import report
from foundry.pretrain.compressors import absent_baselines, compression_baselines, lacks_avx2, zpaq_method

TRAIN = synthetic_docs(30, seed=1)
HOLDOUT = synthetic_docs(5, seed=2)
BOTH = ("zpaq4", "zpaq5")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    for split, texts in (("train", TRAIN), ("holdout", HOLDOUT)):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return tmp_path


@pytest.fixture
def zpaq():
    # pyproject.toml pins it; a venv installed before the pin has no zpaq, and these tests then say so
    return pytest.importorskip("zpaq", reason="zpaq==0.3.7 (pyproject.toml) is not installed in this venv")


def test_zpaq_is_the_cost_of_the_holdout_after_the_strong_context_and_beats_xz(data_dir, zpaq):
    train, holdout = "".join(TRAIN).encode(), "".join(HOLDOUT).encode()
    scores = compression_baselines(data_dir, context_bytes=0, strong_context_bytes=1 << 20, optional=BOTH)
    for level in (4, 5):
        method = zpaq_method(level, len(train + holdout))
        both, alone = (len(zpaq.compress(t, level=level, threads=1, method=method)) for t in (train + holdout, train))
        assert scores[f"zpaq{level}_bits_per_byte"] == 8 * (both - alone) / len(holdout)
    # Context mixing beats LZ77 on text, and -m5's larger model beats -m4's (1.1727 < 1.2599 < 1.5119 on the
    # default data, bench/README.md).
    assert scores["zpaq5_bits_per_byte"] < scores["zpaq4_bits_per_byte"] < scores["xz9e_bits_per_byte"]
    assert absent_baselines(BOTH) == []


def test_zpaq_learns_from_the_training_text_and_only_what_is_asked_is_scored(data_dir, zpaq):
    given = compression_baselines(data_dir, context_bytes=0, strong_context_bytes=1 << 20, optional=("zpaq4",))
    alone = compression_baselines(data_dir, context_bytes=0, strong_context_bytes=0, optional=("zpaq4",))
    assert given["zpaq4_bits_per_byte"] < alone["zpaq4_bits_per_byte"]
    assert "zpaq5_bits_per_byte" not in given
    assert "zpaq4_bits_per_byte" not in compression_baselines(data_dir, 0, 1 << 20)  # none asked: none scored


def test_the_named_text_model_is_the_one_zpaqs_own_analysis_picks_for_text(zpaq):
    """zpaq's CLI (and the binding's `hints`) read the block and pick its model; on text they pick the one
    `zpaq_method` names, so both compressions of the difference are sure to use it."""
    text = "".join(TRAIN).encode()
    for level in (4, 5):
        named = zpaq.compress(text, level=level, threads=1, method=zpaq_method(level))
        assert named == zpaq.compress(text, level=level, threads=1, hints=True)
        assert named != zpaq.compress(text, level=level, threads=1, hints=False)  # the generic model differs


def test_the_block_holds_the_whole_text_so_the_holdout_follows_the_training_text_in_one_model():
    mib = 1 << 20
    assert zpaq_method(5) == zpaq_method(5, 64 * mib - 4096) == "56,128,1"  # the CLI's 64 MiB blocks
    assert zpaq_method(4, 64 * mib - 4095) == "47,128,1" and zpaq_method(4, 128 * mib - 4096) == "47,128,1"
    assert zpaq_method(5, 1 << 40) == "511,128,1"  # libzpaq's largest


HIDDEN = textwrap.dedent(
    """
    import json, sys
    sys.modules["zpaq"] = None  # as if the package were not installed: `import zpaq` raises ImportError
    from pathlib import Path
    from foundry.core.metrics.holdout import HoldoutMetrics
    from foundry.pretrain.compressors import absent_baselines, compression_baselines

    asked = ["zpaq4", "zpaq5"]
    scores = compression_baselines(Path(sys.argv[1]), 0, 1 << 20, asked)
    metrics = HoldoutMetrics(bits_per_byte=1.0, loss=1.0, perplexity=2.7).with_scores(scores, absent_baselines(asked))
    found = {"scores": sorted(scores), "absent": list(metrics.absent_baselines), "rows": metrics.summary_rows()}
    print(json.dumps(found | {"logged": sorted(metrics.as_mlflow())}))
    """
)


def test_without_the_zpaq_package_the_asked_baselines_are_absent_and_named_never_scored(data_dir):
    env = os.environ | {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, "-c", HIDDEN, str(data_dir)], capture_output=True, text=True, env=env, check=True
    )
    found = json.loads(done.stdout.splitlines()[-1])
    assert not any(name.startswith("zpaq") for name in found["scores"])
    assert "ppmd_bits_per_byte" in found["scores"]  # the other baselines are still scored
    assert found["absent"] == ["zpaq4", "zpaq5"]
    rows = dict(found["rows"])
    assert "zpaq" not in rows["baselines"] and "zpaq" not in rows["strongest"]
    assert rows["absent"] == (
        "zpaq -m4 and zpaq -m5 not scored: the `zpaq` package is not installed or does not load (pip install zpaq==0.3.7)."
    )
    assert not any("zpaq" in key or "absent" in key for key in found["logged"])  # no score, no key, in MLflow


def evaluation(scores: dict[str, float], absent: list[str]) -> Evaluation:
    """An evaluation of two models on documents beside `scores`, by hand."""
    from foundry.core.metrics.holdout import HoldoutMetrics
    from foundry.pretrain.fields import GroupScore

    data = EvaluationData(asked="/d", dir=Path("/d"), source="/s", source_digest="b" * 64)
    models = [
        ModelScores(
            model=ModelRef(asked=f"models:/m/{v}", model=f"models:/m/{v}", model_id=None),
            tokenizer="t",
            metrics=HoldoutMetrics(bits_per_byte=bpb, loss=1.0, perplexity=2.7, tokens=9),
            groups={"alpha": GroupScore(bits_per_byte=bpb, loss=1.0, tokens=9, bytes=608068)},
        )
        for v, bpb in (("1", 1.40), ("2", 1.31))
    ]
    baselines = Baselines(scores=scores, train_bytes=10484443, absent=absent)
    return Evaluation(data=data, holdout_bytes=608068, baselines=baselines, models=models, run_id="")


def test_evaluate_names_the_strongest_baseline_and_the_best_model_against_it():
    text = report.comparison(evaluation({"ppmd": 1.3364, "zpaq4": 1.2599, "xz9e": 1.5119}, []))
    assert "| baseline: zpaq -m4 (given 10,484,443 train bytes) (strongest baseline) | 1.2599 |" in text
    assert "| baseline: PPMd order 16 (given 10,484,443 train bytes) | 1.3364 |" in text
    assert (
        "strongest baseline: zpaq -m4 (given 10,484,443 train bytes), 1.2599 bits/byte; the best model, "
        "models:/m/2, is 0.0501 bits/byte (4.0%) behind it"
    ) in text
    assert "absent" not in text


def test_evaluate_names_an_absent_baseline_and_ranks_the_measured_ones():
    text = report.comparison(evaluation({"ppmd": 1.3364, "xz9e": 1.5119}, ["zpaq4"]))
    assert "strongest baseline: PPMd order 16 (given 10,484,443 train bytes), 1.3364 bits/byte" in text
    assert "the best model, models:/m/2, is 0.0264 bits/byte (2.0%) ahead of it" in text
    assert (
        "absent: zpaq -m4 not scored: the `zpaq` package is not installed or does not load (pip install zpaq==0.3.7)."
        in text
    )
    assert "| baseline: zpaq" not in text


def test_the_absent_line_asks_for_the_version_pyproject_pins():
    import tomllib

    from conftest import REPO_ROOT

    from foundry.core.metrics.holdout import ZPAQ_PIN

    assert ZPAQ_PIN in tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def test_a_cpu_without_avx2_leaves_zpaq_out_rather_than_crash(tmp_path):
    """The wheel is built for AVX2: on a CPU without it, its code would end the run with an illegal instruction."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx\n\nprocessor\t: 1\nflags\t\t: fpu sse sse2 avx\n")
    assert lacks_avx2(cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\n")
    assert not lacks_avx2(cpuinfo)
    assert not lacks_avx2(tmp_path / "absent")  # not Linux: importing the package decides
