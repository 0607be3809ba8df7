"""The workloads Foundry knows, as one plain table, and the tables derived from it.

Each workload is registered here once (`REGISTERED`): the module holding its `WORKLOAD`, named by path and imported
only when asked for (`foundry.core.workload.named`), the modality of its data, the dataset kinds its manifests carry,
and what it adds to the models every workload shares, each named by import path (`module:Name`) and imported only
by the shared model that takes it (`foundry.core.extended`): its config sections (`Section`), the fields only datasets
of its modality have (`manifest`), its figures in `foundry evaluate`'s scores (`scores`), and the built-in source
schemes of its data (`sources`). From this table come: the config's `data.modality` values, `BUILTIN_SOURCES` and the
sections of `FoundryConfig` (`foundry.config`), which of them a config checks against the rest (`_Section.misfit`, in
a config of the modality that reads them: `sections_read`); the manifest's `modality` and `kind` values, which
modality each kind is and each modality's own fields (`foundry.data.manifest`); `ModelScores`' fields
(`foundry.evaluate.scores`); and which workload reads a manifest (`Workload.reads`). A new workload is its folder and
one line here. This module imports nothing of Foundry: the config and the data layer read it without reaching the
workloads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Section:
    """A `FoundryConfig` section only one workload's runs read: its key in the config, its class (`module:Name`, a
    `foundry.core.config_section.ConfigSection`; its default is the class's defaults), what the Prefect form and
    params.yaml say of it, and the section it follows in the config (None: after every other, before `search`)."""

    name: str
    model: str
    description: str
    after: str | None = None


@dataclass(frozen=True)
class Registration:
    """One workload: `module` holds its `WORKLOAD`; `modality`: what its data is, a value of `data.modality` (a
    config of that modality trains the workload named as it: `foundry.core.workload.for_config`); `kinds`: the
    dataset kinds its manifests carry, none of them another workload's; `sections`: the config sections only its
    runs read (a section another workload reads too, such as `tokenizer`, is not listed); `manifest`: a pydantic
    model (`module:Name`) of the fields every dataset of its modality has and no other has, each `X | None = None`
    (its `placed_after` may name the shared field one follows); `scores`: a pydantic model of the fields it adds to
    `foundry evaluate`'s `ModelScores`, each with a default; `sources`: each built-in source scheme of its data, with
    why a config of another modality cannot read it."""

    module: str
    modality: str
    kinds: tuple[str, ...]
    sections: tuple[Section, ...] = ()
    manifest: str | None = None
    scores: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict, hash=False)


# name -> its registration; the order is the order `foundry.core.workload.for_data` asks them in
REGISTERED: dict[str, Registration] = {
    "image": Registration(
        "foundry.vision.workload",
        "image",
        ("classification",),
        sections=(
            Section(
                "image",
                "foundry.vision.config:ImageConfig",
                "Image data (data.modality image): one size, near duplicates, shards, class checks.",
                after="data",
            ),
            Section(
                "vision",
                "foundry.vision.config:VisionModelConfig",
                "The image classifier (data.modality image): a small CNN or ViT, and its augmentation.",
                after="model",
            ),
        ),
        manifest="foundry.vision.fields:ManifestFields",
        scores="foundry.vision.fields:ScoresFields",
        sources={"sklearn://": "sklearn:// sources are images: set data.modality to image"},
    ),
    "chat": Registration(
        "foundry.align.workload", "text", ("chat", "preference"), scores="foundry.align.fields:ScoresFields"
    ),
    "text": Registration(
        "foundry.pretrain.workload",
        "text",
        ("text",),
        manifest="foundry.pretrain.fields:ManifestFields",
        scores="foundry.pretrain.fields:ScoresFields",
        sources={
            "stdlib://": "stdlib:// is text: an image source is a folder, an index, an archive or sklearn://digits"
        },
    ),
}


def listed(table: Mapping[str, Registration] = REGISTERED) -> list[Registration]:
    """The registrations in the order their values are listed (the config's form, the manifest's schema, the
    scores, errors): the reverse of the order the workloads are asked in, so that text, the default, comes first as
    it always has."""
    return list(reversed(table.values()))


def modalities(table: Mapping[str, Registration] = REGISTERED) -> tuple[str, ...]:
    """The data modalities, each once: `data.modality`'s values and a manifest's `modality`."""
    return tuple(dict.fromkeys(r.modality for r in listed(table)))


def kinds(table: Mapping[str, Registration] = REGISTERED) -> tuple[str, ...]:
    """The dataset kinds a manifest may carry."""
    return tuple(kind for r in listed(table) for kind in r.kinds)


def modality_of_kind(table: Mapping[str, Registration] = REGISTERED) -> dict[str, str]:
    """Each dataset kind's modality."""
    return {kind: r.modality for r in listed(table) for kind in r.kinds}


def sections(table: Mapping[str, Registration] = REGISTERED) -> tuple[Section, ...]:
    """Every workload's own config sections, in the order the config lists its workloads."""
    return tuple(section for r in listed(table) for section in r.sections)


def sections_read(modality: str, table: Mapping[str, Registration] = REGISTERED) -> tuple[str, ...]:
    """The config sections only runs on data of `modality` read: those a config of that modality checks against
    the rest of it (a section such a run does not read cannot misfit)."""
    return tuple(dict.fromkeys(s.name for r in listed(table) if r.modality == modality for s in r.sections))


def builtin_sources(table: Mapping[str, Registration] = REGISTERED) -> dict[str, tuple[str, str]]:
    """Each built-in source scheme: the modality of what it holds, and why a config of another cannot read it."""
    return {scheme: (r.modality, why) for r in listed(table) for scheme, why in r.sources.items()}
