"""What `foundry evaluate` and the gates' gathering ask of a workload (`foundry.core.workload`): each
registered workload answers, and the code that asks never branches on what the data holds."""

from __future__ import annotations

import re

import pytest
from conftest import REPO_ROOT as REPO

from foundry.core.workload import REGISTERED, named
from foundry.evaluate.scoring import Scoring
from foundry.gates.inputs import ACCURACY, BITS_PER_BYTE

# The modules that ask the workload: a branch on the data's kind or modality here is a workload left unasked.
ASKING = [
    *sorted((REPO / "foundry" / "evaluate").glob("*.py")),
    REPO / "tasks" / "evaluate.py",
    REPO / "tasks" / "evaluation.py",
    REPO / "foundry" / "registry" / "gate.py",
]
BRANCH = re.compile(
    r"""kind\s*([!=]=|(not\s+)?in\s*[(\[{"'])|modality\s*[!=]=|\.modality\b|["'](image|chat)["']|isinstance\([^)]*Metrics"""
)


@pytest.mark.parametrize("path", ASKING, ids=lambda p: str(p.relative_to(REPO)))
def test_the_code_that_asks_a_workload_does_not_branch_on_what_the_data_holds(path):
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if BRANCH.search(line.split("#")[0]) and not line.strip().startswith(("-", "`", '"""'))
    ]
    assert found == []


@pytest.mark.parametrize("name", REGISTERED)
def test_every_workload_says_how_evaluate_scores_and_reports_its_models(name):
    scoring = named(name).scoring()
    assert isinstance(scoring, Scoring) and scoring.figure and scoring.holding and scoring.records


def test_the_pretraining_gate_compares_bits_per_byte_on_text_and_accuracy_on_images():
    assert named("text").gate_compares().measure == BITS_PER_BYTE
    assert named("image").gate_compares().measure == ACCURACY
    with pytest.raises(NotImplementedError, match="chat workload"):  # judged by the alignment gate
        named("chat").gate_compares()


def test_a_source_only_images_come_from_is_read_as_images(tiny_config):
    from foundry.evaluate.scores import source_config

    assert source_config(tiny_config, "sklearn://digits").data.modality == "image"
    assert source_config(tiny_config, "/data/tickets").data.modality == tiny_config.data.modality


def test_the_gates_rules_import_no_feature():
    """The pure rules sit below the features that gather their inputs (the align flow, vision, pretraining)."""
    features = ("foundry.align", "foundry.vision", "foundry.pretrain", "foundry.evaluate", "foundry.registry")
    found = {
        f"{path.name}: {line.strip()}"
        for path in sorted((REPO / "foundry" / "gates").glob("*.py"))
        for line in path.read_text().splitlines()
        if line.lstrip().startswith(("from foundry.", "import foundry.")) and line.split()[1].startswith(features)
    }
    assert found == set()
