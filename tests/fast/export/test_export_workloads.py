"""`foundry export` asks the version's workload what it is exported as (`Workload.exports`): a text model writes hf
and gguf, an image classifier neither, and asking for one is refused naming what the version is and what it is
exported as, before anything is downloaded or written. Against the session's embedded MLflow: a classifier
logged and registered as the pipeline registers one (its run's recorded config says `data.modality: image`)."""

from __future__ import annotations

import pytest
from conftest import REPO_ROOT
from helpers_images import brightness_classifier

from foundry.config import load_config
from foundry.core.workload import for_recorded, named
from foundry.export.publish import FORMATS, ExportRefused, export_version

pytestmark = pytest.mark.usefixtures("home")


@pytest.fixture
def classifier(tmp_path) -> str:
    from foundry.registry import versions
    from foundry.runtime import tracking
    from foundry.vision.package import log_vision_model

    (tmp_path / "model").mkdir()
    model_pt = brightness_classifier(tmp_path / "model" / "model.pt")
    run_id = tracking.start_pipeline_run(load_config(REPO_ROOT / "configs" / "vision-tiny.yaml"), run_name="img")
    name = f"export-img-{tmp_path.name}"
    return f"models:/{name}/{versions.register(log_vision_model(run_id, model_pt), name, run_id, {})}"


@pytest.mark.parametrize("fmt", ["hf", "gguf"])
def test_an_image_classifier_is_refused_naming_what_it_is_and_what_it_exports_to(classifier, home, tmp_path, fmt):
    out = tmp_path / "out"
    with pytest.raises(
        ExportRefused, match=f"is an image classifier: Foundry exports an image classifier in no format, not as {fmt}"
    ):
        export_version(classifier, fmt, out, home)
    assert not out.exists() and not (home / "models").exists()  # refused before any download or write


def test_the_text_and_chat_workloads_export_every_format_and_a_record_before_modality_is_text():
    assert set(named("text").exports) == set(named("chat").exports) == set(FORMATS)
    assert named("image").exports == {}
    assert for_recorded({}).name == "text" and for_recorded({"data": {"modality": "image"}}).name == "image"
