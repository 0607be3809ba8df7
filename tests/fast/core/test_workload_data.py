"""The Workload's data, purge and serving side: which workload a config, a folder or a manifest asks for, and what
each says of its data (the stages, purge and registration ask these instead of branching on modality)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO_ROOT
from helpers_manifests import CHAT, DOCUMENTS, IMAGES

from foundry.config import load_config
from foundry.core import workload
from foundry.core.preparing import Preparing
from foundry.data.manifest import DatasetManifest


@pytest.fixture(scope="module")
def configs():
    text = load_config(REPO_ROOT / "configs" / "tiny.yaml")
    return text, load_config(REPO_ROOT / "configs" / "vision-tiny.yaml")


def test_a_config_asks_for_the_workload_its_data_modality_names(configs):
    text, images = configs
    assert workload.for_config(text).name == "text"
    assert workload.for_config(images).name == "image"


@pytest.mark.parametrize(("values", "name"), [(DOCUMENTS, "text"), (CHAT, "chat"), (IMAGES, "image")])
def test_a_manifest_is_read_by_exactly_one_workload(values, name):
    manifest = DatasetManifest.model_validate(values)
    assert workload.for_manifest(manifest).name == name
    assert [n for n in workload.REGISTERED if workload.named(n).reads(manifest)] == [name]


def test_each_workload_adds_its_own_counts_to_the_data_metrics():
    text = workload.named("text").data_metrics(DatasetManifest.model_validate(DOCUMENTS))
    assert text == {
        **{f"data/{k}": v for k, v in DOCUMENTS["stats"].items()},
        "data/source_binary": 1,
        "data/train_tokens": 2,
        "data/holdout_tokens": 0,
    }
    chat = workload.named("chat").data_metrics(DatasetManifest.model_validate(CHAT))
    assert chat["data/train_records"] == 2 and "data/train_tokens" in chat
    images = workload.named("image").data_metrics(DatasetManifest.model_validate(IMAGES))
    assert images["data/classes"] == 2 and images["data/train_images"] == 2
    assert not any("tokens" in key for key in images)


def test_the_dataset_key_shaping_is_the_workloads_own_sections(configs):
    text, images = configs
    assert set(workload.for_config(text).shaping(text)) == {"tokenizer", "block_size"}
    assert set(workload.for_config(images).shaping(images)) == {"image"}


def test_how_images_are_prepared_or_loaded_is_not_part_of_the_dataset_key(configs):
    _, images = configs
    image = workload.for_config(images)
    other = images.model_copy(
        update={"image": images.image.model_copy(update={"workers": 3, "loader_workers": 0, "decoded_cache_mb": 0})}
    )
    assert image.shaping(other) == image.shaping(images)


def test_what_prepare_prints_names_tokens_or_images():
    assert workload.named("text").prepared_line(DatasetManifest.model_validate(DOCUMENTS)) == (
        "2 train / 0 holdout tokens"
    )
    assert workload.named("image").prepared_line(DatasetManifest.model_validate(IMAGES)) == (
        "2 train / 1 holdout images"
    )


def test_chat_records_are_prepared_by_foundry_align_not_the_data_stage(configs):
    with pytest.raises(ValueError, match="foundry align"):
        workload.named("chat").prepare(Preparing(None, configs[0], REPO_ROOT / "unused"))


def test_only_images_prepare_on_a_base_s_data_and_plot_what_they_hold():
    flags = {n: (w.finetunes_on_base_data, w.plots_show_data) for n in workload.REGISTERED if (w := workload.named(n))}
    assert flags == {"image": (True, True), "chat": (False, False), "text": (False, False)}
    assert workload.named("text").prepares_on_workers and not workload.named("image").prepares_on_workers


def test_the_image_workload_names_the_shards_file_as_the_shards_do():
    from foundry.vision import shards
    from foundry.vision import workload as image_workload

    assert image_workload.FILE == shards.FILE


def test_asking_for_any_workload_imports_neither_torch_nor_pillow():
    """The registry is asked for a workload on every data stage and purge: its modules import no heavy library."""
    program = (
        "import sys\nfrom foundry.core import workload\n"
        "[workload.named(n) for n in workload.REGISTERED]\n"
        "print(sorted(m for m in ('torch', 'PIL') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert done.stdout.strip() == "[]"


def test_each_workload_renders_the_data_stage_from_its_own_audit(tmp_path):
    """What the run page's data-stage table and log line show: documents for text, images for images."""
    (tmp_path / "text").mkdir()
    rules = {"short": {"stage": "filter", "documents": 1}, "email": {"stage": "pii", "documents": 1, "spans": 2}}
    (tmp_path / "text" / "audit.json").write_text(json.dumps({"docs_in": 3, "docs_out": 2, "rules": rules}))
    rows, line = workload.named("text").data_stage(tmp_path / "text")
    assert rows[0] == {"what": "documents in", "reason": "", "documents": 3, "spans": ""}
    assert line == "data: kept 2 of 3 documents; dropped by reason: short 1; PII replaced: email 2 spans in 1 documents"
    (tmp_path / "images").mkdir()
    audit = {"images_in": 4, "images_out": 3, "dropped": {"blank": {"images": 1}}, "labels": {"a": 2, "b": 1}}
    (tmp_path / "images" / "audit.json").write_text(json.dumps(audit))
    rows, line = workload.named("image").data_stage(tmp_path / "images")
    assert rows[:3] == [
        {"what": "images in", "reason": "", "images": 4},
        {"what": "images kept", "reason": "", "images": 3},
        {"what": "dropped", "reason": "blank", "images": 1},
    ]
    assert line.startswith("data: kept 3 of 4 images in 2 classes; dropped by reason: blank 1")


def test_a_gpt_workload_says_how_a_purge_reads_its_documents():
    text, chat = workload.named("text"), workload.named("chat")
    assert (text.documents_table, text.unit, text.tokens_in_shards) == ("documents.csv", "docs", True)
    assert (chat.documents_table, chat.unit, chat.tokens_in_shards) == ("records.csv", "records", False)
    assert text.document_text({"text": "a quokka", "source": "x.txt"}) == "a quokka"
    record = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a quokka"}]}
    assert chat.document_text(record) == "user\nhi\nassistant\na quokka"


def test_each_workload_says_what_it_is_and_which_files_hold_its_data():
    text, images = workload.named("text"), workload.named("image")
    assert (text.describes, images.describes) == ("a text model", "an image classifier")
    assert text.file_holds("notes.MD.gz", [".md"], alone=False) and not text.file_holds("a.png", [".md"], False)
    assert images.file_holds("a.PNG", [".md"], alone=False) and images.file_holds("b.webp.gz", [], alone=False)
    assert images.file_holds("index.csv", [".md"], alone=True)  # an index of images, named by the source itself
    assert not images.file_holds("index.csv", [".md"], alone=False)  # in a folder: a table beside the images
    assert not images.file_holds("index.csv", [".csv"], alone=True)  # a text type this config reads


def test_the_text_workload_names_the_audit_and_data_files_its_preparation_writes(tiny_dataset):
    """What the data stage logs of a prepared folder and of a hydrated version (tasks/data.py) is what it holds."""
    text = workload.named("text")
    assert {p.name for p in tiny_dataset.glob("audit*")} == set(text.audit_files) == {"audit.json", "audit.md"}
    assert all((tiny_dataset / name).is_file() for name in text.data_files)
    assert set(text.data_files) == {"tokenizer.json", "manifest.json"}
