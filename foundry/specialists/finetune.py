"""A domain fine-tune's config: a registered version's model shape and tokenizer (an image classifier's `image` and
`vision` sections), started from its weights; refused before any work when the data is of the other modality."""

from __future__ import annotations

import os
from pathlib import Path
from typing import get_args

from foundry.config import DataConfig, FoundryConfig
from foundry.config.data import BUILTIN_SOURCES
from foundry.core import workload
from foundry.core.contracts import ParentModel
from foundry.core.model_uri import ModelUri
from foundry.training.warm_start import warn_of_train_keys_not_taken

LOOKED_AT = 2000  # files of a local folder whose names tell its modality: enough for a verdict, cheap on a big one
# The data modalities (`data.modality`'s values), in the order `workload.for_data` asks their workloads.
MODALITIES = [name for name in workload.REGISTERED if name in get_args(DataConfig.model_fields["modality"].annotation)]


class ModalityMismatch(ValueError):
    """A text base with image data, or an image base with text data."""


def specialist_config(config: FoundryConfig, parent: ParentModel) -> FoundryConfig:
    """A domain fine-tune of `parent`: its model shape and tokenizer (for an image classifier its modality, `image`
    and `vision` sections, the run's own settings in place where it changed them), started from its weights, this
    config's data and `finetune` settings, trained with `train` under `finetune.train`, registered under
    `finetune.model_name` (derived by default)."""
    base = base_modality(parent)
    check_modality(config, parent.uri, base)
    warn_of_train_keys_not_taken(config, "finetune")
    kept = workload.named(base).finetune_sections(config, parent)  # what the base's workload keeps of its own
    base_name = ModelUri.parse(parent.uri).name
    name = config.finetune.resolved_model_name(base_name, config.data.source_list[0])
    return config.registering_as(name).warm_started_from(parent, config.training_for("finetune"), **kept)


def base_modality(parent: ParentModel) -> str:
    """What the base was trained on, from its recorded config (text for records older than the key)."""
    return workload.for_recorded(parent.config).name


def check_modality(config: FoundryConfig, base_uri: str, base: str) -> None:
    """Refuse data of the other modality than the base's, naming both. The data's modality is what its sources'
    names say (`source_modality`), else what the config states (image is never the default), else the base's."""
    said = {config.data.modality} - {DataConfig.model_fields["modality"].default}  # the default states nothing
    found = {source_modality(source, config.data.extensions) for source in config.data.source_list} - {None}
    data = found.pop() if len(found) == 1 else (said or {base}).pop()
    if data != base:
        raise ModalityMismatch(
            f"{base_uri} is {workload.named(base).describes} (data.modality {base}), but data.source "
            f"{config.data.source!r} holds {data} data (data.modality {data}): fine-tune a {base} model on {base} "
            f"data, or pick {workload.named(data).describes} as the base"
        )


def source_modality(source: str, text_extensions: list[str]) -> str | None:
    """The data modality a source holds where its names tell: a built-in scheme's (`BUILTIN_SOURCES`); a local
    folder whose files are all of one modality's types, or a local file by its type, as the modalities' workloads
    say (`Workload.file_holds`: images, an index of them, or the text types `data.extensions` reads). Else None: a
    mixed folder, a remote or an archive is known once read."""
    for scheme, (holds, _) in BUILTIN_SOURCES.items():
        if source.startswith(scheme):
            return holds
    if "://" in source or any(c in source for c in "*?["):
        return None
    path = Path(source).expanduser()
    alone = path.is_file()
    names = [path.name] if alone else _names(path) if path.is_dir() else []
    kinds = {_kind(name, text_extensions, alone) for name in names} - {None}
    return kinds.pop() if len(kinds) == 1 else None


def _names(folder: Path) -> list[str]:
    names: list[str] = []
    for _, _, files in os.walk(folder):
        names += files[: LOOKED_AT - len(names)]
        if len(names) >= LOOKED_AT:
            break
    return names


def _kind(name: str, text_extensions: list[str], alone: bool) -> str | None:
    """The first data modality whose workload holds a file of this name (images before text, as `for_data` asks)."""
    return next((m for m in MODALITIES if workload.named(m).file_holds(name, text_extensions, alone)), None)
