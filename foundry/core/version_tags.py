"""The MLflow tags Foundry sets on a registered version (and on the runs behind it), their keys named here once.

Versions registered by every earlier layout keep loading: the keys and values written stay byte for byte what
they were, and reading takes whichever of them a version has (`foundry.registry.tags` checks a value before
anything acts on it). A key built from a name (`pretrain`, `export`, `replaces`) is built here; one tag read on its
own, where whether the version carries it matters, is read by `VersionTags`' readers (`data_tags`, `export_of`...)
or `Publication.is_pending`, so that no caller spells a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from foundry.core import gate_tags

RUN_ID = "run_id"  # the training run; a re-registered version's own run only logged the files again
DATA_VERSION = "data_version"
DATA_REMOTE = "data.remote"
DATA_SOURCE = "data.source"
SOURCE_DIGEST = "data.source_digest"
GIT_COMMIT = "git_commit"
GIT_DIRTY = "git_dirty"
PARENT_MODEL = "parent_model"  # comma-separated: one parent for a fine-tune, several for a merge
MERGE_BASE = "merge.base"
MERGE_RECIPE = "merge.recipe"
ALIGN_METHOD = "align.method"
PRETRAIN = "pretrain."  # before DATA_VERSION and DATA_REMOTE: the data an alignment must not forget
GATE = gate_tags.PREFIX  # the gate's record: `gate.verdict`, `gate.passed` and its inputs (`foundry.core.gate_tags`)
REPLACES = "foundry.replaces_"  # then an alias: the version it pointed to before publication moved it
PUBLICATION = "foundry.publication"  # PENDING until the version has all its aliases, then COMPLETE
PENDING, COMPLETE = "pending", "complete"
PURGE = "foundry.purge"  # the purge record a version (and its runs) were tagged with (`foundry purge --apply`)
PURGE_WHO = "foundry.purge.who"  # beside it on the purge record's own run
PURGE_CRITERION = "foundry.purge.criterion"
EXPORT = "foundry.export."  # then a format (`hf`, `gguf`): the artifact `foundry export` wrote for the version
REREGISTERED_FROM = "reregistered_from"  # on a re-registered version and its run: the original
CONFIG = "config"  # the training config, on versions registered when the config was a tag (now the run's file)
PROMOTED_BY = "promoted_by"  # a reviewer's promotion (`PromotionTags`)
PROMOTION_REASON = "promotion_reason"
PROMOTED_AT = "promoted_at"
REPLACED_CHAMPION = "replaced_champion"


def pretrain(key: str) -> str:
    """The key of a data tag (`DATA_VERSION`, `DATA_REMOTE`) that names the pretraining data an alignment replays:
    `pretrain.data_version`."""
    return PRETRAIN + key


def export(fmt: str) -> str:
    """The key of the tag naming the artifact `foundry export` wrote of a format (`hf`): `foundry.export.hf`."""
    return EXPORT + fmt


def replaces(alias: str) -> str:
    """The key of the tag naming the version an alias pointed to before publication moved it:
    `foundry.replaces_champion`."""
    return REPLACES + alias


class Tag(NamedTuple):
    """One tag as a version carries it: its key (what an error names) and its value, None when the version does
    not carry it (an empty value is carried)."""

    key: str
    value: str | None


def _tag(tags: Mapping[str, str], key: str) -> Tag:
    return Tag(key, tags.get(key))


class VersionTags(BaseModel):
    """A registered version's lineage and gate record as its tags hold them (text, as written). A value of
    None, or an empty one where noted, is a tag the version does not carry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    data_version: str = ""
    data_remote: str = ""
    data_source: str = ""
    source_digest: str | None = None  # None: not written (a merge has no source of its own)
    git_commit: str | None = None
    git_dirty: str | None = None
    gate: dict[str, str] = {}  # `gate.*`, as `Decision.tags()` gives them
    parent_model: str = ""  # empty: not written (trained from scratch)
    merge_base: str = ""  # the merge tags, empty for anything but a merge
    merge_recipe: str = ""
    align_method: str = ""  # the alignment tags, empty for anything but an alignment
    pretrain_data_version: str = ""
    pretrain_data_remote: str = ""

    def as_tags(self) -> dict[str, str]:
        """The tags to write: always the run and the data; the others only when set."""
        optional = {
            SOURCE_DIGEST: self.source_digest,
            GIT_COMMIT: self.git_commit,
            GIT_DIRTY: self.git_dirty,
        }
        tags = {
            RUN_ID: self.run_id,
            DATA_VERSION: self.data_version,
            DATA_REMOTE: self.data_remote,
            DATA_SOURCE: self.data_source,
            **{k: v for k, v in optional.items() if v is not None},
            **self.gate,
        }
        rest = {
            PARENT_MODEL: self.parent_model,
            MERGE_BASE: self.merge_base,
            MERGE_RECIPE: self.merge_recipe,
            ALIGN_METHOD: self.align_method,
            pretrain(DATA_VERSION): self.pretrain_data_version,
            pretrain(DATA_REMOTE): self.pretrain_data_remote,
        }
        return tags | {k: v for k, v in rest.items() if v}

    def with_align_method(self, method: str) -> VersionTags:
        """These tags on a version an alignment (`sft`, `dpo`) produced."""
        return self.model_copy(update={"align_method": method})

    def with_pretrain_data(self, data_version: str, remote: str) -> VersionTags:
        """These tags naming the pretraining data an alignment replays, which the next one must not forget."""
        return self.model_copy(update={"pretrain_data_version": data_version, "pretrain_data_remote": remote})

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> VersionTags:
        """What a version's tags hold, as text, unchecked ("" or None where a tag is absent): for showing. A
        value used to act on goes through `foundry.registry.tags`, which checks it."""
        return cls(
            run_id=tags.get(RUN_ID, ""),
            data_version=tags.get(DATA_VERSION, ""),
            data_remote=tags.get(DATA_REMOTE, ""),
            data_source=tags.get(DATA_SOURCE, ""),
            source_digest=tags.get(SOURCE_DIGEST),
            git_commit=tags.get(GIT_COMMIT),
            git_dirty=tags.get(GIT_DIRTY),
            gate={k: v for k, v in tags.items() if k.startswith(GATE)},
            parent_model=tags.get(PARENT_MODEL, ""),
            merge_base=tags.get(MERGE_BASE, ""),
            merge_recipe=tags.get(MERGE_RECIPE, ""),
            align_method=tags.get(ALIGN_METHOD, ""),
            pretrain_data_version=tags.get(pretrain(DATA_VERSION), ""),
            pretrain_data_remote=tags.get(pretrain(DATA_REMOTE), ""),
        )

    # One tag of a version's (`tags`: the registry's `version.tags`), where whether it is there matters: what
    # `foundry.registry.tags` checks before anything acts on it, and the marks other commands set.

    @staticmethod
    def data_tags(tags: Mapping[str, str], pretrain_data: bool = False) -> tuple[Tag, Tag]:
        """The data version and its remote: the version's own, or (`pretrain_data`) the pretraining data an
        alignment replays."""
        keys = (pretrain(DATA_VERSION), pretrain(DATA_REMOTE)) if pretrain_data else (DATA_VERSION, DATA_REMOTE)
        return _tag(tags, keys[0]), _tag(tags, keys[1])

    @staticmethod
    def data_versions_named(tags: Mapping[str, str]) -> list[str]:
        """Every data version a version's or a run's tags name, unchecked: `data_version`, `pretrain.data_version`,
        `parent_data_version`... (any key ending as `DATA_VERSION`, set)."""
        return [value for key, value in tags.items() if key.endswith(DATA_VERSION) and value]

    @staticmethod
    def remotes_named(tags: Mapping[str, str]) -> set[str]:
        """Every DVC remote a version's or a run's tags name: `data.remote`, `pretrain.data.remote`..."""
        return {value for key, value in tags.items() if key.endswith(DATA_REMOTE) and value}

    @staticmethod
    def parent_tag(tags: Mapping[str, str]) -> Tag:
        """The versions it was built from, comma-separated."""
        return _tag(tags, PARENT_MODEL)

    @staticmethod
    def run_tag(tags: Mapping[str, str]) -> Tag:
        """The training run (a re-registered version names the original)."""
        return _tag(tags, RUN_ID)

    @staticmethod
    def replaced_tag(tags: Mapping[str, str], alias: str) -> Tag:
        """The version `alias` pointed to before publication moved it to this one."""
        return _tag(tags, replaces(alias))

    @staticmethod
    def export_of(tags: Mapping[str, str], fmt: str) -> str | None:
        """The artifact `foundry export` wrote of `fmt` for the version (under its run), None when none."""
        return tags.get(export(fmt))

    @staticmethod
    def purge_of(tags: Mapping[str, str]) -> str | None:
        """The purge record the version was tagged with (`foundry purge --apply`), None when none."""
        return tags.get(PURGE)

    @staticmethod
    def config_of(tags: Mapping[str, str]) -> str | None:
        """The training config as JSON, on versions registered when the config was a tag; None on later ones."""
        return tags.get(CONFIG)


class Publication(BaseModel):
    """The marks a version is created with: publication `pending`, not promoted, and the versions its aliases
    pointed to before (`replaces`: alias to version, '' for none) so that a failed publication gives them back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replaces: dict[str, str]

    def as_tags(self) -> dict[str, str]:
        marks = {PUBLICATION: PENDING, gate_tags.PROMOTED: gate_tags.flag(False)}
        return marks | {replaces(alias): version for alias, version in self.replaces.items()}

    @staticmethod
    def is_pending(tags: Mapping[str, str]) -> bool:
        """Whether a version's tags (`version.tags`) mark its publication as not complete: it is no champion yet."""
        return tags.get(PUBLICATION) == PENDING


class PromotionTags(BaseModel):
    """A reviewer's promotion as the version records it: who, why, when, and the champion it replaced ('' none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    promoted_by: str
    promotion_reason: str
    promoted_at: str  # ISO 8601, UTC, to the second
    replaced_champion: str = ""

    def as_tags(self) -> dict[str, str]:
        """In the order they were always set, `gate.promoted` among them."""
        return {
            PROMOTED_BY: self.promoted_by,
            PROMOTION_REASON: self.promotion_reason,
            gate_tags.PROMOTED: gate_tags.flag(True),
            PROMOTED_AT: self.promoted_at,
            REPLACED_CHAMPION: self.replaced_champion,
        }

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> PromotionTags | None:
        """The reviewer's promotion a version's tags record, or None when no reviewer promoted it."""
        if PROMOTED_BY not in tags:
            return None
        return cls(
            promoted_by=tags[PROMOTED_BY],
            promotion_reason=tags.get(PROMOTION_REASON, ""),
            promoted_at=tags.get(PROMOTED_AT, ""),
            replaced_champion=tags.get(REPLACED_CHAMPION, ""),
        )
