"""What the image workload's gates decide on: an image classifier scored by holdout accuracy (higher is better),
under the rules text's inputs follow (`foundry.gates.pretrain`, `foundry.gates.specialist`). Each registers under its
`gate` when this module is imported, which the image workload (`foundry.vision.workload`) does."""

from __future__ import annotations

from typing import ClassVar, Literal

from foundry.gates.inputs import ACCURACY, AgainstBase, AgainstChampion, Compared, Measure, OldScores


class OldImageHoldout(OldScores):
    """Two image classifiers' accuracy on the champion's own holdout; worse means lower here."""

    measure: ClassVar[Measure] = ACCURACY
    challenger_accuracy: float
    champion_accuracy: float


class ImageInputs(AgainstChampion):
    """An image classifier and the champion of its name, by holdout accuracy (higher is better); the same rule
    as `PretrainInputs` (`foundry.gates.pretrain`), with `min_improvement` and `max_regression` in accuracy."""

    measure: ClassVar[Measure] = ACCURACY
    gate: Literal["image"] = "image"
    challenger_accuracy: float
    min_improvement: float
    auto_promote: bool
    champion_version: str | None = None
    champion_accuracy: float | None = None  # on the challenger's holdout
    old_holdout: OldImageHoldout | None = None
    footing: str = ""


class ImageSpecialistInputs(ImageInputs, AgainstBase):
    """A fine-tuned image classifier by holdout accuracy, its base (`champion_*`: the base on the new holdout and
    both on the base's own) and the specialist's own champion on the new holdout: `SpecialistInputs`' rule."""

    gate: Literal["image_specialist"] = "image_specialist"
    base: str  # models:/NAME/VERSION the fine-tune started from
    incumbent_version: str | None = None  # None: the specialist has no champion yet
    incumbent_accuracy: float | None = None


BY_ACCURACY = Compared(ACCURACY, ImageInputs, OldImageHoldout, ImageSpecialistInputs)  # image classifiers
