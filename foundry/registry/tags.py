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

from foundry.core import version_tags as tag
from foundry.core.contracts import RUN_ID, DataVersion, check_data_version
from foundry.core.model_uri import FORMS, ModelUri, check_version
from foundry.core.version_tags import VersionTags

T = TypeVar("T")


class BadTag(ValueError):
    """A registered version's tag does not hold the kind of value its name promises."""


def checked(version, key: str, kind: str, check: Callable[[str], T]) -> T:
    """`check(version.tags[key])`, or `BadTag` naming the version, the tag, its value and `kind`."""
    value = version.tags[key]
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


def data_version(version, prefix: str = "") -> DataVersion:
    """The data version a registered version's `<prefix>data_version` and `<prefix>data.remote` tags name;
    `KeyError` naming the tag when one is missing, `BadTag` when the version is not 32 hex digits."""
    key, remote = prefix + tag.DATA_VERSION, prefix + tag.DATA_REMOTE
    for needed in (key, remote):
        if needed not in version.tags:
            raise KeyError(needed)
    digest = checked(version, key, "a data version (32 hex digits)", check_data_version)
    return DataVersion(data_version=digest, remote=version.tags[remote])


def recorded_data(version, prefix: str = "") -> DataVersion | None:
    """`data_version(version, prefix)`, or None when the version records no such data (either tag absent or
    empty); a tag that is there is checked all the same."""
    if not (version.tags.get(prefix + tag.DATA_VERSION) and version.tags.get(prefix + tag.DATA_REMOTE)):
        return None
    return data_version(version, prefix)


def parent_models(version) -> list[ModelUri]:
    """The versions a registered version was built from (`parent_model`, comma-separated): one for a
    fine-tune, several for a merge, none for a model trained from scratch."""
    if tag.PARENT_MODEL not in version.tags:
        return []
    return checked(version, tag.PARENT_MODEL, f"a comma-separated list of {FORMS}", _uris)


def run_id(version) -> str:
    """The training run a version came from: its `run_id` tag (a re-registered version names the original run
    there), else the run that registered it."""
    if not version.tags.get(tag.RUN_ID):
        return version.run_id
    return checked(version, tag.RUN_ID, "an MLflow run id", _run_id)


def replaced_version(version, which: str) -> str:
    """The version that alias `which` pointed to before this one took it ('' for none), as publication noted."""
    key = tag.REPLACES + which
    if not version.tags.get(key):
        return ""
    return checked(version, key, "a model version (digits)", check_version)


def _uris(text: str) -> list[ModelUri]:
    return [ModelUri.parse(part.strip()) for part in text.split(",") if part.strip()]


def _run_id(text: str) -> str:
    if not RUN_ID.fullmatch(text):
        raise ValueError(text)
    return text
