"""foundry.core.registrations: one line registers a workload (#54), and the config's `data.modality`, the manifest's
`modality` and `kind` and `MODALITY_OF_KIND` are derived from the table: the three workloads give the values these
held before the table existed, and a fourth one's modality and kind are accepted with no other edit."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import get_args

from conftest import REPO_ROOT

from foundry.config.data import DataConfig
from foundry.core.registrations import REGISTERED, Registration, kinds, modalities, modality_of_kind
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

    assert all(set(r.sections) <= set(FoundryConfig.model_fields) for r in REGISTERED.values())
    assert sections_read("image") == ("image", "vision") and sections_read("text") == ()
    assert sections_read("audio", {"audio": Registration("m", "audio", ("clip",), ("audio",))}) == ("audio",)
    misfit = ["vision.arch=vit", "image.size=30"]
    assert load_config(None, misfit).vision.misfit(load_config(None, misfit)) is not None
    assert load_config(None, misfit).data.modality == "text"  # loads: a text run reads no `vision`
