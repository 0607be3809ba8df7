"""Fine-tuning a registered image classifier on an extended label set (#27): the pure parts (foundry/vision/finetune.py:
the base's class order kept with new labels appended, a grown head that keeps the base's logits), the fine-tune's
config (foundry/specialists/finetune.py: the base's modality, `image` and `vision` sections, data of the other
modality refused), its data prepared on the base's with the base's classes first and trained from the base's weights
for a step, a base scored on labels it lacks, and the specialist gate by accuracy. No server, no registry."""

from __future__ import annotations

import pytest
import torch
from conftest import REPO_ROOT
from helpers_images import BRIGHTNESS, brightness_classifier, gray_png

from foundry.config import load_config
from foundry.core.contracts import ParentModel, SourceManifest
from foundry.gates import specialist
from foundry.gates.decision import Decision
from foundry.specialists.finetune import ModalityMismatch, specialist_config
from foundry.vision.finetune import warm_start_state
from foundry.vision.gate_inputs import ImageSpecialistInputs, OldImageHoldout
from foundry.vision.shards import ShardManifest
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
    state = warm_start_state(saved, [*BRIGHTNESS, "black", "white"])
    grown.load_state_dict(state)
    for key, value in saved["state_dict"].items():
        assert torch.equal(state[key][: len(value)] if value.dim() else state[key], value)  # old weights and head rows
    images = torch.randint(0, 256, (6, 1, 8, 8), generator=torch.Generator().manual_seed(1)).float()
    with torch.no_grad():
        before, after = base(images)[0], grown(images)[0]
    assert after.shape == (6, 5)
    # The same weights; a wider head's matrix product may round otherwise (oneDNN did on a CPU with AMX).
    torch.testing.assert_close(after[:, :3], before, rtol=1e-6, atol=1e-6)
    assert not torch.equal(after[:, 3], after[:, 4])  # the new rows are fresh, not copies


def test_a_data_set_that_reorders_the_base_classes_is_refused(tmp_path):
    saved = torch.load(brightness_classifier(tmp_path / "model.pt", perfect=False), weights_only=True)
    with pytest.raises(ValueError, match="do not begin with the base's"):
        warm_start_state(saved, ["bright", "dark", "mid"])


# --- a fine-tune of a registered classifier: its config, its data's class order, its warm start, its gate -------

LEVELS = {**BRIGHTNESS, "amber": 70}  # "amber" sorts before every base class: kept last all the same
PER_LABEL = 8


def labelled_folder(root, labels, seed: int = 0):
    """Class-per-subfolder 8x8 gray PNGs, PER_LABEL of each label, seeds apart from any other folder's."""
    for n, label in enumerate(labels):
        (root / label).mkdir(parents=True)
        for i in range(PER_LABEL):
            gray_png(root / label / f"{i}.png", LEVELS[label], seed + n * 100 + i)
    return root


def image_base(config, weights: str = "model.pt", uri: str = "models:/img-base/1") -> ParentModel:
    """A registered image classifier as `base_model` hands it over: its recorded config (vision-tiny's), no data."""
    manifest = SourceManifest(source="s", digest="d", files=0, bytes=0, entries=[])
    return ParentModel(
        uri=uri, weights=weights, tokenizer="", config=config.model_dump(mode="json"), source_manifest=manifest
    )


def vision_tiny(*overrides: str):
    return load_config(REPO_ROOT / "configs" / "vision-tiny.yaml", list(overrides))


def test_an_image_base_gives_its_modality_image_and_vision_sections_the_runs_own_settings_winning(tmp_path):
    folder = labelled_folder(tmp_path / "new", ["dark", "mid"])
    given = load_config(None, [f"data.source={folder}", "vision.crop_padding=0", "image.min_per_class=4"])
    assert given.data.modality == "text"  # as `foundry finetune MODEL --set data.source=DIR` loads it
    tuned = specialist_config(given, image_base(vision_tiny()))
    assert tuned.data.modality == "image" and tuned.data.source == str(folder)
    assert (tuned.image.size, tuned.image.channels, tuned.image.near_dup_distance) == (8, "gray", 2)  # the base's
    assert (tuned.vision.arch, tuned.vision.widths) == ("cnn", [8, 16])  # the base's
    assert tuned.vision.crop_padding == 0 and tuned.image.min_per_class == 4  # the run's own
    assert tuned.train.init_from == "model.pt" and tuned.registry.model_name == "img-base-new"


def test_a_retrain_of_an_image_champion_keeps_its_modality_input_and_architecture(tmp_path):
    """`foundry retrain` of a classifier: the champion's `image` and `vision` shape and its weights as the start,
    whatever config names the source (here none: the defaults' CNN would be 32 and 64 wide)."""
    from foundry.training.warm_start import retrain_config

    folder = labelled_folder(tmp_path / "more", ["dark", "mid"])
    given = load_config(None, [f"data.source={folder}", "retrain.train.max_steps=7", "registry.model_name=img"])
    tuned = retrain_config(given, image_base(vision_tiny()))
    assert tuned.data.modality == "image" and (tuned.vision.arch, tuned.vision.widths) == ("cnn", [8, 16])
    assert (tuned.image.size, tuned.image.channels) == (8, "gray") and tuned.tokenizer == given.tokenizer
    assert tuned.train.init_from == "model.pt" and tuned.train.max_steps == 7 and tuned.registry.model_name == "img"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("vision.widths=[4, 8]", r"vision.widths is \[8, 16\] in the base model and \[4, 8\] here"),
        ("image.size=16", "image.size is 8 in the base model and 16 here: a fine-tune keeps its base's input"),
        ("finetune.method=lora", "an image classifier, fine-tuned whole: set finetune.method to full"),
    ],
)
def test_a_setting_the_base_weights_cannot_take_is_refused_naming_it(tmp_path, setting, message):
    folder = labelled_folder(tmp_path / "new", ["dark"])
    with pytest.raises(ValueError, match=message):
        specialist_config(load_config(None, [f"data.source={folder}", setting]), image_base(vision_tiny()))


def test_data_of_the_other_modality_is_refused_before_any_work_naming_both(tmp_path):
    images = labelled_folder(tmp_path / "images", ["dark", "mid"])
    texts = tmp_path / "texts"
    texts.mkdir()
    for i in range(3):
        (texts / f"doc{i}.md").write_text("words " * 50)
    text_base = image_base(load_config(REPO_ROOT / "configs" / "tiny.yaml"), uri="models:/it-gpt/2")
    with pytest.raises(
        ModalityMismatch, match=r"models:/it-gpt/2 is a text model \(data.modality text\), but .* holds image data"
    ):
        specialist_config(load_config(None, [f"data.source={images}"]), text_base)
    for source in (str(texts), "stdlib://email"):
        with pytest.raises(
            ModalityMismatch, match=r"is an image classifier \(data.modality image\), but .* holds text data"
        ):
            specialist_config(load_config(None, [f"data.source={source}"]), image_base(vision_tiny()))


def test_the_fine_tunes_data_keeps_the_base_classes_first_and_training_grows_the_head_from_the_base(
    tmp_path, monkeypatch
):
    from foundry.core.preparing import DataBasis
    from foundry.training.run import TrainingRun
    from foundry.training.trainer import train
    from foundry.vision.stage import acquire_images
    from foundry.vision.training import vision_model_args
    from tasks.data_parallel import run_prepare

    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    exact = ["image.near_dup_distance=-1", "data.holdout_fraction=0.25"]  # noisy gray squares: no near copies
    base_config = vision_tiny(f"data.source={labelled_folder(tmp_path / 'old', list(BRIGHTNESS))}", *exact)
    source = acquire_images(base_config, tmp_path / "old_source.json")
    base_data = run_prepare(source, base_config, tmp_path / "base_data", progress=False)
    assert base_data.manifest.classes == ["bright", "dark", "mid"]  # sorted: the base's own order
    base = ImageClassifier(VisionConfig(**vision_model_args(base_config, ShardManifest.read(tmp_path / "base_data"))))
    saved = {"modality": "image", "model_args": base.config.to_dict(), "state_dict": base.state_dict()}
    torch.save(saved | {"classes": base_data.manifest.classes}, tmp_path / "base.pt")

    new = labelled_folder(tmp_path / "new", ["amber", *BRIGHTNESS], seed=5000)
    steps = ["train.max_steps=1", "train.batch_size=8", "finetune.train.learning_rate=1e-12", "train.warmup_steps=0"]
    # The defaults compile: about 30 s here; tests/slow/vision/test_vision_pipeline.py does
    steps += ["train.compile=false"]
    given = load_config(None, [f"data.source={new}", *exact, *steps, "train.val_batches=1"])
    tuned = specialist_config(given, image_base(base_config, str(tmp_path / "base.pt")))
    source = acquire_images(tuned, tmp_path / "new_source.json")
    prepared = run_prepare(source, tuned, tmp_path / "data", progress=False, basis=DataBasis(tmp_path / "base_data"))
    assert prepared.manifest.classes == ["bright", "dark", "mid", "amber"]

    trained = torch.load(
        train(tuned, TrainingRun(tmp_path / "data", tmp_path / "ckpt", None, "v"), False), weights_only=True
    )
    assert trained["classes"] == ["bright", "dark", "mid", "amber"] and trained["model_args"]["num_classes"] == 4
    head, old = trained["state_dict"]["net.head.weight"], saved["state_dict"]["net.head.weight"]
    assert torch.allclose(head[:3], old, atol=1e-6)  # a step of 1e-12 from the base's rows
    assert head.shape == (4, old.shape[1])


def test_a_base_scored_on_data_with_a_label_it_lacks_misses_those_images(tmp_path):
    from foundry.vision.evaluate import accuracy_on
    from foundry.vision.shards import ImageRecord, write_shards

    records = []
    for n, label in enumerate(["dark", "mid", "bright", "amber"] * 2):
        path = gray_png(tmp_path / f"{n}.png", LEVELS[label], n)
        records.append(ImageRecord(str(path), label, "holdout" if n < 4 else "train"))
    write_shards(records, tmp_path / "data", classes=[*BRIGHTNESS, "amber"])
    perfect = brightness_classifier(tmp_path / "model.pt")  # right on every image of its three classes
    assert accuracy_on(perfect, tmp_path / "data", 4) == 0.75


@pytest.mark.parametrize(
    ("old", "incumbent", "verdict"),
    [
        (0.79, None, "0.9000 beats the base's 0.8000 accuracy on the domain holdout"),
        (0.70, None, "forgets: 0.7000 against the base's 0.8000 accuracy on the base's holdout, worse by 0.1000"),
        (0.79, 0.95, "0.9000 does not beat the specialist's champion v3 (0.9500 accuracy) on the domain holdout"),
    ],
)
def test_the_specialist_gate_judges_an_image_fine_tune_by_accuracy(old, incumbent, verdict):
    inputs = ImageSpecialistInputs(
        challenger_accuracy=0.9,
        min_improvement=0.0,
        auto_promote=True,
        champion_version="1",
        champion_accuracy=0.8,
        old_holdout=OldImageHoldout(
            data_version="v0", challenger_accuracy=old, champion_accuracy=0.8, max_regression=0.02
        ),
        base="models:/img-base/1",
        incumbent_version=None if incumbent is None else "3",
        incumbent_accuracy=incumbent,
    )
    decision = specialist.decide(inputs)
    assert decision.verdict.startswith(verdict)
    assert decision.passed == (old == 0.79 and incumbent is None)
    assert Decision.model_validate_json(decision.model_dump_json()) == decision  # the one Decision type, any gate
