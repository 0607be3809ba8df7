"""Fine-tuning an image classifier on an extended label set, the pure parts (foundry/vision/finetune.py): the
base's class order kept with new labels appended, and a grown head that keeps the base's logits."""

from __future__ import annotations

import pytest
import torch
from helpers import BRIGHTNESS, brightness_classifier

from foundry.vision.finetune import warm_start_state
from foundry.vision.table import merged_classes
from models.vision import ImageClassifier, VisionConfig


def test_the_base_keeps_its_class_indices_and_new_labels_follow_sorted():
    assert merged_classes(["dark", "mid", "bright"], ["white", "bright", "black", "dark"]) == [
        "dark",
        "mid",
        "bright",
        "black",
        "white",
    ]


def test_a_grown_head_gives_the_base_logits_for_the_base_classes(tmp_path):
    saved = torch.load(brightness_classifier(tmp_path / "model.pt", perfect=False), weights_only=True)
    base = ImageClassifier(VisionConfig(**saved["model_args"])).eval()
    base.load_state_dict(saved["state_dict"])
    grown = ImageClassifier(VisionConfig(**{**saved["model_args"], "num_classes": 5})).eval()
    grown.load_state_dict(warm_start_state(saved, [*BRIGHTNESS, "black", "white"]))
    images = torch.randint(0, 256, (6, 1, 8, 8), generator=torch.Generator().manual_seed(1)).float()
    with torch.no_grad():
        before, after = base(images)[0], grown(images)[0]
    assert after.shape == (6, 5)
    assert torch.equal(after[:, :3], before)  # every old row as it was
    assert not torch.equal(after[:, 3], after[:, 4])  # the new rows are fresh, not copies


def test_a_data_set_that_reorders_the_base_classes_is_refused(tmp_path):
    saved = torch.load(brightness_classifier(tmp_path / "model.pt", perfect=False), weights_only=True)
    with pytest.raises(ValueError, match="do not begin with the base's"):
        warm_start_state(saved, ["bright", "dark", "mid"])
