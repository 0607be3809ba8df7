"""A domain fine-tune's config: a registered version's model shape and tokenizer (an image classifier's `image` and
`vision` sections), started from its weights; refused before any work when the data is of the other modality."""

from __future__ import annotations

import os
from pathlib import Path

from foundry.config import DataConfig, FoundryConfig
from foundry.config.image import IMAGE_EXTENSIONS
from foundry.core import workload
from foundry.core.contracts import ParentModel
from foundry.core.model_uri import ModelUri
from foundry.training.warm_start import warn_of_train_keys_not_taken

LOOKED_AT = 2000  # files of a local folder whose names tell its modality: enough for a verdict, cheap on a big one
KIND = {"text": "a text model", "image": "an image classifier"}


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
    registry = config.registry.model_copy(update={"model_name": name})
    return config.warm_started_from(parent, config.training_for("finetune"), **kept, registry=registry)


def base_modality(parent: ParentModel) -> str:
    """What the base was trained on, from its recorded config (text for records older than the key)."""
    return (parent.config.get("data") or {}).get("modality", "text")


def check_modality(config: FoundryConfig, base_uri: str, base: str) -> None:
    """Refuse data of the other modality than the base's, naming both. The data's modality is what its sources'
    names say (`source_modality`), else what the config states (image is never the default), else the base's."""
    said = {config.data.modality} - {DataConfig.model_fields["modality"].default}  # the default states nothing
    found = {source_modality(source, config.data.extensions) for source in config.data.source_list} - {None}
    data = found.pop() if len(found) == 1 else (said or {base}).pop()
    if data != base:
        raise ModalityMismatch(
            f"{base_uri} is {KIND[base]} (data.modality {base}), but data.source {config.data.source!r} holds "
            f"{data} data (data.modality {data}): fine-tune a {base} model on {base} data, or pick {KIND[data]} "
            "as the base"
        )


def source_modality(source: str, text_extensions: list[str]) -> str | None:
    """ "image" or "text" where a source's names tell: the built-in schemes; a local folder whose files are all of
    one kind (images, or the text types `data.extensions` reads); a local file by its type (a .csv indexes images).
    Else None: a mixed folder, a remote or an archive is known once read."""
    if source.startswith("sklearn://"):
        return "image"
    if source.startswith("stdlib://"):
        return "text"
    if "://" in source or any(c in source for c in "*?["):
        return None
    path = Path(source).expanduser()
    if path.is_file() and path.suffix.lower() == ".csv" and ".csv" not in text_extensions:
        return "image"
    names = [path.name] if path.is_file() else _names(path) if path.is_dir() else []
    kinds = {_kind(name, text_extensions) for name in names} - {None}
    return kinds.pop() if len(kinds) == 1 else None


def _names(folder: Path) -> list[str]:
    names: list[str] = []
    for _, _, files in os.walk(folder):
        names += files[: LOOKED_AT - len(names)]
        if len(names) >= LOOKED_AT:
            break
    return names


def _kind(name: str, text_extensions: list[str]) -> str | None:
    suffix = Path(name.lower().removesuffix(".gz")).suffix
    if suffix in IMAGE_EXTENSIONS:
        return "image"
    return "text" if suffix in text_extensions else None
