"""The image dataset through the text pipeline's data stage functions: acquire, prepare (shards, manifest), the
Great Expectations gate, DVC versioning and hydration, on scikit-learn's bundled digits (configs/vision-tiny.yaml)."""

from __future__ import annotations

import shutil

import pytest
from conftest import REPO_ROOT

from foundry.config import ConfigError, FoundryConfig, as_recorded, load_config, validate
from foundry.core.preparing import DataBasis, Validating
from foundry.data.hydrate import hydrate_version, verify_dataset
from foundry.data.manifest import DatasetManifest, WrongModality
from foundry.data.validate import ValidationFailed, validate_dataset
from foundry.data.validation_report import ValidationReport
from foundry.data.versioning import dataset_key, version_dataset
from foundry.vision import builtin
from foundry.vision.shards import ShardDataset, ShardManifest
from foundry.vision.stage import acquire_images
from foundry.vision.table import read_table
from tasks.data_parallel import run_prepare


@pytest.fixture(scope="module")
def vision_config():
    return load_config(REPO_ROOT / "configs" / "vision-tiny.yaml")


@pytest.fixture(scope="module")
def digits(vision_config, tmp_path_factory):
    """The tiny vision twin's digits, acquired, prepared and validated once: (source manifest, prepared folder)."""
    root = tmp_path_factory.mktemp("digits")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FOUNDRY_HOME", str(root / "home"))
        source = acquire_images(vision_config, root / "source_manifest.json")
        run_prepare(source, vision_config, root / "prepared", progress=False)
    validate_dataset(Validating(root / "prepared", vision_config, root / "validation_report.json"))
    return source, root / "prepared"


def test_digits_are_prepared_as_shards_with_an_image_manifest(digits):
    source, prepared = digits
    manifest = DatasetManifest.read(prepared)
    shards = ShardManifest.read(prepared)
    assert (manifest.modality, manifest.kind, manifest.image_shape) == ("image", "classification", (1, 8, 8))
    assert manifest.classes == [str(d) for d in range(10)] == shards.classes
    assert manifest.image_counts == shards.counts
    assert (
        sum(manifest.image_counts["train"].values())
        == manifest.count("train_images")
        == len(ShardDataset(prepared, "train"))
    )
    assert manifest.count("images_in") == source.files == 1797 and manifest.count("holdout_images") > 0
    assert not (prepared / "images").exists()  # the PNGs live in the shards
    assert set(manifest.files) == {p.name for p in prepared.iterdir()} - {"manifest.json"}
    assert len(shards.shards_of("train")) > 1  # image.shard_images 512
    with pytest.raises(WrongModality, match="vocab_size is a field of text datasets"):
        manifest.vocab_size  # noqa: B018 - the read itself raises


def test_the_prepared_digits_are_byte_identical_from_one_process_or_two(digits, vision_config, tmp_path):
    source, _ = digits
    folders = {}
    for workers in (1, 2):
        config = load_config(REPO_ROOT / "configs" / "vision-tiny.yaml", [f"image.workers={workers}"])
        assert dataset_key(config, source.digest) == dataset_key(vision_config, source.digest)
        folders[workers] = tmp_path / f"prepared-{workers}"
        run_prepare(source, config, folders[workers], progress=False)
    files = {w: {p.name: p.read_bytes() for p in folder.iterdir()} for w, folder in folders.items()}
    assert files[1] == files[2] and len(files[1]) > 5


def test_a_versioned_image_dataset_hydrates_verified_on_a_fresh_node(digits, vision_config, tmp_path):
    source, prepared = digits
    staged = tmp_path / "staged"
    shutil.copytree(prepared, staged)
    data = version_dataset(vision_config, staged, source, tmp_path / "home-a")
    target = hydrate_version(data, tmp_path / "node")
    assert verify_dataset(target) == []
    assert DatasetManifest.read(target).classes == DatasetManifest.read(prepared).classes
    images, label = next(iter(ShardDataset(target, "holdout")))
    assert tuple(images.shape) == (1, 8, 8) and 0 <= label < 10
    shard = next(target.glob("train-*.tar"))
    shard.chmod(0o644)
    shard.write_bytes(shard.read_bytes()[:-1024])
    assert verify_dataset(target) == [shard.name]


def test_a_child_keeps_the_parents_splits_and_class_order(digits, vision_config, tmp_path, monkeypatch):
    source, prepared = digits
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    child = run_prepare(source, vision_config, tmp_path / "child", progress=False, basis=DataBasis(prepared)).manifest
    assert child.classes == DatasetManifest.read(prepared).classes
    before = {row.sha256: row.split for row in read_table(prepared)}
    assert {row.sha256: row.split for row in read_table(tmp_path / "child")} == before
    validate_dataset(Validating(tmp_path / "child", vision_config, tmp_path / "report.json", parent=prepared))


def test_the_gate_blocks_a_class_under_the_minimum(vision_config, tmp_path, monkeypatch):
    monkeypatch.setenv("FOUNDRY_HOME", str(tmp_path / "home"))
    folder = tmp_path / "few-sevens"
    shutil.copytree(builtin.materialise("sklearn://digits", tmp_path / "sources"), folder)
    for png in sorted((folder / "7").glob("*.png"))[5:]:  # 5 sevens, under image.min_per_class (10)
        png.unlink()
    config = load_config(REPO_ROOT / "configs" / "vision-tiny.yaml", [f"data.source={folder}"])
    source = acquire_images(config, tmp_path / "source_manifest.json")
    run_prepare(source, config, tmp_path / "prepared", progress=False)
    with pytest.raises(ValidationFailed, match=r"classes: expect_column_values_to_be_between\(column=images") as info:
        validate_dataset(
            Validating(tmp_path / "prepared", config, tmp_path / "report.json", docs_dir=tmp_path / "docs")
        )
    report = ValidationReport.read(tmp_path / "report.json")
    assert not report.success and [name for name, _ in report.failures()] == ["classes"]
    assert info.value.report.failures()[0][1].observed == "1 unexpected rows, e.g. [5]"  # the 5 sevens
    assert (tmp_path / "docs" / "index.html").is_file()


def test_the_dataset_key_follows_the_image_section_not_the_tokenizer(vision_config):
    key = dataset_key(vision_config, "ab" * 32)
    changed = load_config(REPO_ROOT / "configs" / "vision-tiny.yaml", ["image.near_dup_distance=6"])
    untouched = load_config(REPO_ROOT / "configs" / "vision-tiny.yaml", ["tokenizer.vocab_size=1024"])
    assert dataset_key(changed, "ab" * 32) != key == dataset_key(untouched, "ab" * 32)


def test_a_text_datasets_manifest_is_written_back_byte_identical(tiny_dataset, tmp_path):
    manifest = DatasetManifest.read(tiny_dataset)
    assert manifest.write(tmp_path / "manifest.json").read_bytes() == (tiny_dataset / "manifest.json").read_bytes()
    assert b"modality" not in (tmp_path / "manifest.json").read_bytes()
    with pytest.raises(WrongModality, match="classes is a field of image datasets"):
        manifest.classes  # noqa: B018


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.modality=image"], "stdlib:// is text"),
        (["data.source=sklearn://digits"], "sklearn:// sources are images: set data.modality to image"),
        (
            ["data.modality=image", "data.source=sklearn://digits", "vision.arch=vit", "image.size=30"],
            r"image.size \(30\) must be a multiple of vision.patch_size \(4\)",
        ),
        (["vision.arch=vit", "vision.n_embd=30"], "must be a multiple of vision.n_head"),
    ],
)
def test_image_settings_are_checked_when_the_config_loads(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_a_text_config_recorded_before_the_image_sections_loads_as_text():
    recorded = FoundryConfig().model_dump(mode="json")
    for section in ("image", "vision"):
        del recorded[section]
    del recorded["data"]["modality"]
    assert validate(as_recorded(recorded)) == FoundryConfig() and FoundryConfig().data.modality == "text"


def test_the_image_workload_names_the_audit_and_data_files_its_preparation_writes(digits):
    """What the data stage logs of a prepared folder and of a hydrated version (tasks/data.py) is what it holds."""
    from foundry.core import workload

    _, prepared = digits
    image = workload.named("image")
    assert {p.name for p in prepared.glob("audit*")} == set(image.audit_files) == {"audit.json"}
    assert all((prepared / name).is_file() for name in image.data_files)
    assert set(image.data_files) == {"manifest.json", "shards.json"}
