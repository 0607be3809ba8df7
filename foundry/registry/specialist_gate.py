"""The specialist gate's I/O for both modalities: a fine-tuned language model by bits per byte
(`gate.gather_specialist`), a fine-tuned image classifier by holdout accuracy (`gather_image_specialist`), one
rule (`foundry.gates.specialist`) deciding either.

An image fine-tune's base is scored on the new holdout (its labels the base lacks count as misses: it cannot
name them), both are scored on the base's own holdout (the forgetting guard, `evaluation.max_regression` read
as accuracy), and the specialist's own champion, if any, on the new holdout."""

from __future__ import annotations

from foundry.config import FoundryConfig
from foundry.core.contracts import Candidate
from foundry.gates import specialist
from foundry.gates.decision import Decision
from foundry.gates.inputs import ImageSpecialistInputs
from foundry.registry import gate, versions


def gather_image_specialist(config: FoundryConfig, candidate: Candidate, base_uri: str) -> ImageSpecialistInputs:
    """`gate.gather_specialist` for an image classifier: the base (`champion_*`) on the new holdout and both on
    the base's own, the specialist's own champion (`finetune.model_name`) on the new holdout."""
    c, home = candidate, candidate.run.home
    base = versions.resolve(base_uri)
    base_accuracy = gate.image_accuracy(base, config, c.data_dir, c.data, home)
    incumbent = versions.champion(config.registry.model_name)  # fails closed: an error is not "no champion"
    incumbent_accuracy = None
    if incumbent is not None:
        incumbent_accuracy = gate.image_accuracy(incumbent, config, c.data_dir, c.data, home)
    return ImageSpecialistInputs(
        challenger_accuracy=c.metrics.accuracy,
        min_improvement=config.evaluation.min_improvement,
        auto_promote=config.registry.auto_promote,
        champion_version=str(base.version),
        champion_accuracy=base_accuracy,
        old_holdout=gate.old_image_holdout(base, c, base_accuracy, config),
        base=f"models:/{base.name}/{base.version}",
        incumbent_version=None if incumbent is None else str(incumbent.version),
        incumbent_accuracy=incumbent_accuracy,
    )


def decide_specialist(config: FoundryConfig, candidate: Candidate, base_uri: str) -> Decision:
    """The specialist gate on `candidate`, by its modality's measure."""
    from foundry.vision.metrics import VisionMetrics

    if isinstance(candidate.metrics, VisionMetrics):
        return specialist.decide(gather_image_specialist(config, candidate, base_uri))
    return gate.decide_specialist(config, candidate, base_uri)
