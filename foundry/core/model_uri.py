"""A registered model's URI, `models:/NAME/VERSION` or `models:/NAME@ALIAS`, MLflow 3's logged model's,
`models:/m-ID`, and a run's artifact's, `runs:/RUN_ID/PATH`, built and parsed in one place.

URIs come from the command line and from registry tags (`parent_model`, `merge.base`), and their parts end
up in registry queries and in paths (`$FOUNDRY_HOME/models/NAME-vVERSION/`), so each part is checked: a
version is digits, an alias MLflow's alias characters, a name MLflow's allowed set without path separators,
`@`, `..`, a leading dot or control characters.
"""

from __future__ import annotations

import re
from typing import Literal, overload

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

PREFIX = "models:/"
FORMS = "models:/NAME/VERSION or models:/NAME@ALIAS"
MODELS_GLOB = PREFIX + "*"  # every model URI, as a Prefect event's resource matches them
RUNS_PREFIX = "runs:/"
_RUN_ID = re.compile(r"[0-9a-f]{32}")  # as MLflow makes them: a uuid4's hex
_RUN_SOURCE = re.compile(r"runs:/([0-9a-f]{32})(/|$)")
_VERSION = re.compile(r"[0-9]+")  # ASCII digits only: str.isdigit() takes '²' too
_ALIAS = re.compile(r"[A-Za-z0-9_\-]+")
_MODEL_ID = re.compile(r"m-[0-9a-f]{32}")  # as MLflow makes them: "m-" and a uuid4's hex


def check_name(name: str) -> str:
    """A registered model's name, when it is safe as one component of a path; else ValueError."""
    unsafe = (
        not name
        or name != name.strip()
        or any(c in name for c in "/\\:@")
        or ".." in name
        or name.startswith(".")
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    )
    if unsafe:
        raise ValueError(
            f"{name!r} is not a model name: it must be non-empty, without '/', '\\', ':', '@', '..', a leading "
            "dot, surrounding spaces or control characters"
        )
    return name


def check_version(version: str) -> str:
    """A model version number (MLflow's are 1, 2, ...), as text; else ValueError."""
    if not _VERSION.fullmatch(version):
        raise ValueError(f"{version!r} is not a model version: it must be digits")
    return version


class ModelUri(BaseModel):
    """One registered version (`version`) or whichever version an alias points to (`alias`), never both."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: str | None = None
    alias: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value)

    @field_validator("version")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        return None if value is None else check_version(value)

    @field_validator("alias")
    @classmethod
    def _alias(cls, value: str | None) -> str | None:
        if value is not None and not _ALIAS.fullmatch(value):
            raise ValueError(f"{value!r} is not an alias: letters, digits, '_' and '-' only")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> ModelUri:
        if (self.version is None) == (self.alias is None):
            raise ValueError("a model URI names either a version or an alias")
        return self

    @overload
    @classmethod
    def parse(cls, text: str, *, logged: Literal[False] = False) -> ModelUri: ...

    @overload
    @classmethod
    def parse(cls, text: str, *, logged: Literal[True]) -> ModelUri | LoggedModelUri: ...

    @classmethod
    def parse(cls, text: str, *, logged: bool = False) -> ModelUri | LoggedModelUri:
        """`models:/NAME/VERSION` or `models:/NAME@ALIAS`, and with `logged` also a logged model's
        `models:/m-ID`; anything else is a ValueError naming `text`."""
        if not isinstance(text, str) or not text.startswith(PREFIX):
            raise ValueError(f"{text!r} is not a model URI; use {FORMS}")
        rest = text.removeprefix(PREFIX)
        if LoggedModelUri.matches(text):
            if logged:
                return LoggedModelUri(model_id=rest)
            raise ValueError(f"{text!r} is a logged model, not a registered version: register it, then use {FORMS}")
        if "@" in rest:
            name, alias = rest.split("@", 1)
            parts = {"name": name, "alias": alias}
        else:
            name, slash, version = rest.partition("/")
            if not slash:
                raise ValueError(f"{text!r} names no version; use {FORMS}")
            parts = {"name": name, "version": version}
        try:
            return cls(**parts)
        except ValidationError as exc:
            reasons = "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())
            raise ValueError(f"{text!r} is not a model URI ({reasons}); use {FORMS}") from None

    @classmethod
    def of(cls, version) -> ModelUri:
        """The pinned URI of a resolved MLflow model version (anything with `name` and `version`)."""
        return cls(name=version.name, version=str(version.version))

    @property
    def pinned(self) -> bool:
        return self.version is not None

    @property
    def folder(self) -> str:
        """`NAME-vVERSION`: this version's folder under `$FOUNDRY_HOME/models/`."""
        if self.version is None:
            raise ValueError(f"{self} names an alias, not a version: resolve it first")
        return f"{self.name}-v{self.version}"

    def __str__(self) -> str:
        return (
            f"{PREFIX}{self.name}/{self.version}" if self.version is not None else f"{PREFIX}{self.name}@{self.alias}"
        )


class LoggedModelUri(BaseModel):
    """MLflow 3's logged model, `models:/m-ID`: what logging a model returns and a registered version's source
    (no name, no version: the registry gives those)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model_id: str

    @field_validator("model_id")
    @classmethod
    def _model_id(cls, value: str) -> str:
        if not _MODEL_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not a logged model id: 'm-' and 32 lowercase hex digits")
        return value

    @staticmethod
    def matches(text: str) -> bool:
        """Whether `text` is exactly a logged model's URI."""
        return isinstance(text, str) and text.startswith(PREFIX) and bool(_MODEL_ID.fullmatch(text[len(PREFIX) :]))

    @classmethod
    def parse(cls, text: str) -> LoggedModelUri:
        """`models:/m-ID`; anything else is a ValueError naming `text`."""
        if not cls.matches(text):
            raise ValueError(f"{text!r} is not a logged model's URI: use models:/m-ID (32 lowercase hex digits)")
        return cls(model_id=text.removeprefix(PREFIX))

    @classmethod
    def id_in(cls, text: str | None) -> str | None:
        """The logged model id when `text` is a logged model's URI (a version's source may be one), else None."""
        return text.removeprefix(PREFIX) if text and cls.matches(text) else None

    def __str__(self) -> str:
        return f"{PREFIX}{self.model_id}"


class RunsUri(BaseModel):
    """A file or folder among a run's artifacts, `runs:/RUN_ID/PATH` (`runs:/RUN_ID`: all of them): where MLflow
    reads a run's recorded config and source manifest, and a version's source when it was registered from a run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    path: str = ""

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str) -> str:
        if not _RUN_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not a run id: 32 lowercase hex digits")
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        parts = value.split("/")
        if value and (value.startswith("/") or "\\" in value or any(p in ("", ".", "..") for p in parts)):
            raise ValueError(f"{value!r} is not a path among a run's artifacts: relative, '/'-separated, no '..'")
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError(f"{value!r} holds control characters")
        return value

    @classmethod
    def parse(cls, text: str) -> RunsUri:
        """`runs:/RUN_ID/PATH` or `runs:/RUN_ID`; anything else is a ValueError naming `text`."""
        if not isinstance(text, str) or not text.startswith(RUNS_PREFIX):
            raise ValueError(f"{text!r} is not a run's URI; use runs:/RUN_ID/PATH")
        run_id, _, path = text.removeprefix(RUNS_PREFIX).partition("/")
        try:
            return cls(run_id=run_id, path=path)
        except ValidationError as exc:
            reasons = "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())
            raise ValueError(f"{text!r} is not a run's URI ({reasons}); use runs:/RUN_ID/PATH") from None

    @staticmethod
    def run_id_in(text: str | None) -> str | None:
        """The run a version's source names when it is `runs:/RUN_ID` or `runs:/RUN_ID/...`, whatever follows;
        else None (a logged model's `models:/m-ID`, a path)."""
        match = _RUN_SOURCE.match(text) if isinstance(text, str) else None
        return match.group(1) if match else None

    def __str__(self) -> str:
        return f"{RUNS_PREFIX}{self.run_id}/{self.path}" if self.path else f"{RUNS_PREFIX}{self.run_id}"
