"""foundry.core.registrations: one line registers a workload (#54), and the config's `data.modality`, the manifest's
`modality` and `kind` and `MODALITY_OF_KIND` are derived from the table: the three workloads give the values these
held before the table existed, and a fourth one's modality and kind are accepted with no other edit. A fourth
workload defined only in a folder of its own (a package in a temporary folder) brings, through its one line, a config
section, a manifest field, a scores field and a source scheme, and the config, the manifest and `ModelScores` take
them and read them back (the three workloads' shapes are kept: `test_shared_shapes`)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import get_args

from conftest import REPO_ROOT

from foundry.config.data import DataConfig
from foundry.core.registrations import REGISTERED, Registration, Section, kinds, modalities, modality_of_kind
from foundry.data.manifest import MODALITY_OF_KIND, DatasetManifest

# What the config and the manifest listed by hand before the table, in that order (the order the config's form and
# the errors show).
BEFORE_MODALITIES = ("text", "image")
BEFORE_KINDS = ("text", "chat", "preference", "classification")
BEFORE_MODALITY_OF_KIND = {"text": "text", "chat": "text", "preference": "text", "classification": "image"}

AUDIO = Registration("tests.audio_workload", "audio", ("clip",))


def test_the_three_workloads_give_the_values_written_by_hand_before():
    assert modalities() == BEFORE_MODALITIES and kinds() == BEFORE_KINDS
    assert list(modality_of_kind().items()) == list(BEFORE_MODALITY_OF_KIND.items())
    assert list(MODALITY_OF_KIND.items()) == list(BEFORE_MODALITY_OF_KIND.items())
    assert get_args(DataConfig.model_fields["modality"].annotation) == BEFORE_MODALITIES
    assert get_args(DatasetManifest.model_fields["modality"].annotation) == BEFORE_MODALITIES
    assert get_args(DatasetManifest.model_fields["kind"].annotation) == BEFORE_KINDS
    # The Prefect form shows the config's JSON schema: the same choices, in the same order.
    assert DataConfig.model_json_schema()["properties"]["modality"]["enum"] == list(BEFORE_MODALITIES)


def test_each_modality_selects_the_workload_named_as_it_and_each_kind_is_one_workloads():
    """`for_config` asks for the workload named as the config's `data.modality`; `for_manifest` for the one whose
    kinds hold the manifest's kind."""
    assert all(REGISTERED[modality].modality == modality for modality in modalities())
    assert len(kinds()) == len(set(kinds()))
    assert {name: r.kinds for name, r in REGISTERED.items()} == {
        "image": ("classification",),
        "chat": ("chat", "preference"),
        "text": ("text",),
    }


def test_a_new_registration_adds_its_modality_and_kinds_after_the_others():
    table = {"audio": AUDIO, **REGISTERED}
    assert modalities(table) == (*BEFORE_MODALITIES, "audio")
    assert kinds(table) == (*BEFORE_KINDS, "clip")
    assert modality_of_kind(table) == {**BEFORE_MODALITY_OF_KIND, "clip": "audio"}


# Registers an audio workload before Foundry's config and manifest are imported, then asks them about audio.
NEW_WORKLOAD = f"""
import json
from foundry.core import registrations
table = {{"audio": registrations.{AUDIO!r}, **registrations.REGISTERED}}  # asked first: its data the most specific
registrations.REGISTERED.clear()
registrations.REGISTERED.update(table)
from foundry.config.data import DataConfig
from foundry.data.manifest import MODALITY_OF_KIND, DatasetManifest
config = DataConfig(modality="audio", source="clips/")
manifest = dict(source="clips/", source_digest="0", source_skipped={{}}, stats={{}}, holdout_fraction=0.05)
clip = DatasetManifest.model_validate({{**manifest, "modality": "audio", "kind": "clip"}})
try:
    tokens = dict(vocab_size=8, eot_id=0, train_tokens=1, holdout_tokens=1)
    DatasetManifest.model_validate({{**manifest, **tokens, "modality": "text", "kind": "clip"}})
    refused = ""
except ValueError as exc:
    refused = str(exc)
print(json.dumps({{
    "config": config.modality, "enum": DataConfig.model_json_schema()["properties"]["modality"]["enum"],
    "manifest": [clip.modality, clip.kind], "written": clip.as_json()["kind"], "of_kind": MODALITY_OF_KIND,
    "refused": refused,
}}))
"""


def test_a_new_registration_is_accepted_by_the_config_and_the_manifest_with_no_other_edit():
    done = subprocess.run(
        [sys.executable, "-c", NEW_WORKLOAD], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["config"] == "audio" and seen["enum"] == [*BEFORE_MODALITIES, "audio"]
    assert seen["manifest"] == ["audio", "clip"] and seen["written"] == "clip"
    assert seen["of_kind"] == {**BEFORE_MODALITY_OF_KIND, "clip": "audio"}
    assert "kind 'clip' does not go with modality 'text'" in seen["refused"]


def test_each_registered_section_is_a_config_section_and_only_its_modalitys_config_checks_it():
    """The image sections are checked against the rest (a ViT's patches against `image.size`) in an image config
    alone: a text config does not read them, and a value there it could not train with is no error of its."""
    from foundry.config import FoundryConfig, load_config
    from foundry.core.registrations import sections_read

    assert all({s.name for s in r.sections} <= set(FoundryConfig.model_fields) for r in REGISTERED.values())
    assert sections_read("image") == ("image", "vision") and sections_read("text") == ()
    audio = Registration("m", "audio", ("clip",), (Section("audio", "m:AudioConfig", "Audio clips."),))
    assert sections_read("audio", {"audio": audio}) == ("audio",)
    misfit = ["vision.arch=vit", "image.size=30"]
    assert load_config(None, misfit).vision.misfit(load_config(None, misfit)) is not None
    assert load_config(None, misfit).data.modality == "text"  # loads: a text run reads no `vision`


# A fourth workload's own folder: its config section, the field its datasets have, its figures (nothing of Foundry's
# config, manifest or scores is imported here: the shared models import this module when they are built).
TOY_FIELDS = '''
"""What the toy audio workload adds to the models every workload shares."""

from typing import ClassVar

from pydantic import BaseModel, Field

from foundry.core.config_section import ConfigSection


class AudioConfig(ConfigSection):
    """Audio clips: one rate."""

    sample_rate: int = Field(16_000, ge=1_000, description="Hz every clip is resampled to.")

    def misfit(self, config):
        if self.sample_rate % 1_000:
            return f"audio.sample_rate ({self.sample_rate}) must be whole kHz"
        return None


class ManifestFields(BaseModel):
    placed_after: ClassVar[dict[str, str]] = {"sample_rate": "holdout_fraction"}

    sample_rate: int | None = None


class AudioScores(BaseModel):
    word_accuracy: float
    clips: int


class ScoresFields(BaseModel):
    audio: AudioScores | None = None
'''

# Its one line in REGISTERED, added (asked first: its data the most specific) before the shared models are imported.
TOY_LINE = """{"audio": Registration(
    "toyaudio.workload", "audio", ("clip",),
    sections=(Section("audio", "toyaudio.fields:AudioConfig", "Audio clips (data.modality audio).", after="model"),),
    manifest="toyaudio.fields:ManifestFields", scores="toyaudio.fields:ScoresFields",
    sources={"tone://": "tone:// sources are audio: set data.modality to audio"},
)}"""

TOY_RUN = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import toyaudio.fields  # first: the workload's own module imports none of the shared models
from foundry.core import registrations
from foundry.core.registrations import Registration, Section
table = {**TOY_LINE, **registrations.REGISTERED}
registrations.REGISTERED.clear()
registrations.REGISTERED.update(table)

import yaml
from foundry.config import FoundryConfig, load_config, to_commented_yaml, to_yaml, validate
from foundry.data.manifest import DatasetManifest, WrongModality
from foundry.evaluate.scores import ModelRef, ModelScores

def refused(call):
    try:
        call()
    except (ValueError, WrongModality) as exc:
        return str(exc)
    return ""

config = load_config(None, ["data.modality=audio", "data.source=tone://birds", "audio.sample_rate=8000"])
again = validate(yaml.safe_load(to_yaml(config)))
base = dict(source="tone://birds", source_digest="0", source_skipped={}, stats={}, holdout_fraction=0.05)
clip = DatasetManifest.model_validate({**base, "modality": "audio", "kind": "clip", "sample_rate": 8000})
folder = Path(sys.argv[1])
read = DatasetManifest.read(clip.write(folder))
tokens = dict(vocab_size=8, eot_id=0, train_tokens=1, holdout_tokens=1)
text = DatasetManifest.model_validate({**base, **tokens, "source": "/d"})
scores = ModelScores(model=ModelRef(asked="m", model="models:/m/1", model_id=None), tokenizer="", audio={"word_accuracy": 0.5, "clips": 4})
scores_back = ModelScores.model_validate_json(scores.model_dump_json())
print(json.dumps({
    "sections": list(FoundryConfig.model_fields),
    "sample_rate": config.audio.sample_rate, "round_trip": again == config,
    "commented": "# Audio clips (data.modality audio)." in to_commented_yaml(config),
    "form": FoundryConfig.model_json_schema()["properties"]["audio"]["description"],
    "misfit": refused(lambda: load_config(None, ["data.modality=audio", "data.source=tone://b", "audio.sample_rate=8001"])),
    "text_ignores": load_config(None, ["audio.sample_rate=8001"]).audio.sample_rate,
    "tone_in_text": refused(lambda: load_config(None, ["data.source=tone://birds"])),
    "manifest_keys": list(clip.as_json()), "read_back": read == clip and read.sample_rate == 8000,
    "text_has_none": refused(lambda: text.sample_rate),
    "clip_has_no_tokens": refused(lambda: read.vocab_size),
    "text_with_it": refused(lambda: DatasetManifest.model_validate({**base, **tokens, "sample_rate": 1})),
    "clip_without_it": refused(lambda: DatasetManifest.model_validate({**base, "modality": "audio", "kind": "clip"})),
    "scores": scores.model_dump(mode="json"), "scores_back": scores_back == scores,
    "scores_type": type(scores_back.audio) is toyaudio.fields.AudioScores,
}))
""".replace("TOY_LINE", TOY_LINE)


def test_a_fourth_workload_in_its_own_folder_brings_its_section_field_scores_and_source_through_one_line(tmp_path):
    package = tmp_path / "toyaudio"
    package.mkdir()
    (package / "__init__.py").write_text('"""A toy audio workload, registered by a test."""\n')
    (package / "fields.py").write_text(TOY_FIELDS)
    done = subprocess.run(
        [sys.executable, "-c", TOY_RUN, str(tmp_path)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # its section, in the place its line names; the config keeps it, and params.yaml and the form describe it
    assert seen["sections"][:6] == ["data", "image", "tokenizer", "model", "vision", "audio"]
    assert seen["sections"][-1] == "search"
    assert seen["sample_rate"] == 8000 and seen["round_trip"] and seen["commented"]
    assert seen["form"] == "Audio clips (data.modality audio)."
    # it checks itself against the rest in an audio config only
    assert "audio.sample_rate (8001) must be whole kHz" in seen["misfit"] and seen["text_ignores"] == 8001
    # its source scheme: a text config cannot read it
    assert "tone:// sources are audio: set data.modality to audio" in seen["tone_in_text"]
    # its manifest field: written where it is placed, read back, absent and refused on text, required on audio
    assert seen["manifest_keys"] == [
        "modality",
        "kind",
        "source",
        "source_digest",
        "source_skipped",
        "stats",
        "holdout_fraction",
        "sample_rate",
    ]
    assert seen["read_back"]
    assert "sample_rate is a field of audio datasets; this dataset's modality is 'text'" in seen["text_has_none"]
    assert "vocab_size is a field of text datasets; this dataset's modality is 'audio'" in seen["clip_has_no_tokens"]
    assert "the manifest of a 'text' dataset has no sample_rate" in seen["text_with_it"]
    assert "the manifest of a 'audio' dataset needs sample_rate" in seen["clip_without_it"]
    # its figures in `foundry evaluate`'s scores, before the run id, read back as its own type
    assert list(seen["scores"])[-2:] == ["audio", "run_id"]
    assert seen["scores"]["audio"] == {"word_accuracy": 0.5, "clips": 4}
    assert seen["scores_back"] and seen["scores_type"]
