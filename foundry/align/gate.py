"""The alignment gate's I/O: what its pure rule (`foundry.gates.alignment`) decides on, gathered from the align
flow's scores and the registry. An aligned model is judged against its base and the champion of its name, on the
same held-out alignment data; the champion is looked up with `versions.champion`, which fails closed: a registry
error is not "no champion"."""

from __future__ import annotations

import logging

from foundry.config import FoundryConfig
from foundry.core.contracts import Candidate
from foundry.core.metrics.aligned import AlignmentMetrics
from foundry.core.metrics.scores import AlignedScores
from foundry.gates import alignment
from foundry.gates.decision import Decision
from foundry.gates.inputs import AlignmentInputs
from foundry.registry import versions

log = logging.getLogger(__name__)


def alignment_inputs(
    config: FoundryConfig,
    metrics: AlignmentMetrics,
    incumbent_version: str | None = None,
    incumbent: AlignedScores | None = None,
) -> AlignmentInputs:
    """The alignment gate's inputs from the aligned model's and the base's scores, and the champion of
    `align.model_name` scored on the same held-out data (when there is one)."""
    return AlignmentInputs(
        method=config.align.method,
        aligned=metrics.aligned,
        base=metrics.base,
        max_regression=config.evaluation.max_regression,
        auto_promote=config.registry.auto_promote,
        incumbent_version=incumbent_version,
        incumbent=incumbent,
    )


def gather_alignment(config: FoundryConfig, candidate: Candidate) -> AlignmentInputs:
    """The champion of the name the aligned model registers under, scored on the candidate's held-out
    alignment data; one with another tokenizer cannot be scored on these tokens and counts as unscored."""
    from foundry.align.evaluation import heldout_scores
    from foundry.data.manifest import DatasetManifest
    from models.gpt import load_gpt

    c, name = candidate, config.registry.model_name
    current = versions.champion(name)  # fails closed: an error is not "no champion"
    if current is None:
        return alignment_inputs(config, c.metrics)
    artifacts = versions.download(current, c.run.home)
    scores = None
    if (artifacts / "tokenizer.json").read_bytes() == c.tokenizer.read_bytes():
        manifest = DatasetManifest.read(c.data_dir)
        held = heldout_scores(load_gpt(artifacts / "model.pt"), c.data_dir, manifest, config.evaluation.batch_size)
        scores = AlignedScores(**held)
        log.info("champion v%s of %s on this held-out data: %s", current.version, name, held)
    else:
        log.warning("champion v%s of %s has another tokenizer: not comparable on this data", current.version, name)
    return alignment_inputs(config, c.metrics, str(current.version), scores)


def decide_alignment(config: FoundryConfig, candidate: Candidate) -> Decision:
    """The alignment gate on `candidate`: gathered, then decided by `foundry.gates.alignment`."""
    return alignment.decide(gather_alignment(config, candidate))
