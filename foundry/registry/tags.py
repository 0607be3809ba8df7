"""Values read back from a registered version's tags, checked before anything uses them.

A tag is text that anyone with write access to the registry can set. The ones Foundry acts on name folders
(`data_version` becomes `hydrated/<version>/`), registry entries (`parent_model`, `foundry.replaces_*`) and
runs (`run_id`), so each is checked against its format first; a tag that fails stops the run, naming the
version and the tag (fail closed: no fallback to another tag or to nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import ValidationError

from foundry.core.contracts import RUN_ID, DataVersion, check_data_version
from foundry.core.model_uri import FORMS, ModelUri, check_version
from foundry.core.version_tags import Tag, VersionTags

T = TypeVar("T")


class BadTag(ValueError):
    """A registered version's tag does not hold the kind of value its name promises."""


def checked(version, found: Tag, kind: str, check: Callable[[str], T]) -> T:
    """`check` of a tag the version carries (`found`, read by `VersionTags`), or `BadTag` naming the version, the
    tag, its value and `kind`."""
    key, value = found
    if value is None:
        raise KeyError(key)
    try:
        return check(value)
    except (ValueError, ValidationError):
        raise BadTag(
            f"{ModelUri.of(version)} tag {key}={value!r} is not {kind}: refusing to use it "
            "(fix or delete the tag in the registry)"
        ) from None


def read(version) -> VersionTags:
    """Everything Foundry tagged `version` with, as text (for showing: a value acted on is checked by the
    functions below)."""
    return VersionTags.from_tags(version.tags or {})


def data_version(version, pretrain: bool = False) -> DataVersion:
    """The data version a registered version's `data_version` and `data.remote` tags name (`pretrain`: its
    `pretrain.*` ones); `KeyError` naming the tag when one is missing, `BadTag` when the version is not 32 hex
    digits."""
    digest, remote = VersionTags.data_tags(version.tags, pretrain)
    for needed in (digest, remote):
        if needed.value is None:
            raise KeyError(needed.key)
    return DataVersion(
        data_version=checked(version, digest, "a data version (32 hex digits)", check_data_version), remote=remote.value
    )


def recorded_data(version, pretrain: bool = False) -> DataVersion | None:
    """`data_version(version, pretrain)`, or None when the version records no such data (either tag absent or
    empty); a tag that is there is checked all the same."""
    if not all(found.value for found in VersionTags.data_tags(version.tags, pretrain)):
        return None
    return data_version(version, pretrain)


def parent_models(version) -> list[ModelUri]:
    """The versions a registered version was built from (`parent_model`, comma-separated): one for a
    fine-tune, several for a merge, none for a model trained from scratch."""
    found = VersionTags.parent_tag(version.tags)
    if found.value is None:
        return []
    return checked(version, found, f"a comma-separated list of {FORMS}", _uris)


def run_id(version) -> str:
    """The training run a version came from: its `run_id` tag (a re-registered version names the original run
    there), else the run that registered it."""
    found = VersionTags.run_tag(version.tags)
    if not found.value:
        return version.run_id
    return checked(version, found, "an MLflow run id", _run_id)


def replaced_version(version, which: str) -> str:
    """The version that alias `which` pointed to before this one took it ('' for none), as publication noted."""
    found = VersionTags.replaced_tag(version.tags, which)
    if not found.value:
        return ""
    return checked(version, found, "a model version (digits)", check_version)


def _uris(text: str) -> list[ModelUri]:
    return [ModelUri.parse(part.strip()) for part in text.split(",") if part.strip()]


def _run_id(text: str) -> str:
    if not RUN_ID.fullmatch(text):
        raise ValueError(text)
    return text
