"""Shared pydantic models that the registered workloads add fields to, each field where its workload places it.

The config (`foundry.config.FoundryConfig`), a dataset's manifest (`foundry.data.manifest.DatasetManifest`) and
`foundry evaluate`'s scores (`foundry.evaluate.scores.ModelScores`) hold fields every workload shares and fields one
workload brings: its config sections, the fields only its datasets have, its holdout figures. A workload names them
in its registration (`foundry.core.registrations`) by import path (`module:Name`), imported here (`imported`) when
the shared model is built, so that the core imports no feature and a new workload edits no shared file.

The shared model is built with pydantic's `create_model`, not by mixing the workloads' classes in: a field's place in
the model is its place in the JSON schema (the Prefect form), in params.yaml, in a manifest's bytes and in
`foundry evaluate`'s JSON, and a workload's fields sit between shared ones there (the `image` section after `data`, a
text dataset's `vocab_size` after `ledger`), which mixins, whose fields all come before or after the class's own,
cannot place. So a shared model is written as two plain classes, its rules and methods on a base without fields and
its fields on a class read for them (`extended` takes both), and a workload's field goes after the field it names
(`Added.after`), else before the shared field that closes the model (`search`, `files`, `run_id`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from pydantic import BaseModel, create_model
from pydantic.fields import FieldInfo


def imported(path: str) -> Any:
    """What `module:Name` names, its module imported now."""
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"{path!r} names no object: a registration names one as module:Name")
    found = getattr(import_module(module), name, None)
    if found is None:
        raise ImportError(f"{module} has no {name}: the registration naming {path!r} expects it there")
    return found


@dataclass(frozen=True)
class Added:
    """One field a workload adds to a shared model: its name, its type, its pydantic field (default, description),
    and the shared field it follows (None: before the field that closes the shared model)."""

    name: str
    annotation: Any
    info: FieldInfo
    after: str | None = None


def fields_of(model: type[BaseModel]) -> list[Added]:
    """The fields of a workload's model, in its order: one named in its `placed_after` (`{field: shared field}`)
    follows that shared field, and each other follows the one before it (the first, before the closing field)."""
    placed: dict[str, str] = getattr(model, "placed_after", {})
    added, after = [], None
    for name, info in model.model_fields.items():
        after = placed.get(name, after)
        added.append(Added(name, info.annotation, info, after))
    return added


def extended(
    name: str, rules: type[BaseModel], shared: type[BaseModel], added: list[Added], closing: str, doc: str | None
) -> Any:
    """The model `name`: `rules`' validators and methods over `shared`'s fields with `added` in their places (after
    the field each names, in the order given; else before `closing`). Typed Any: each reader knows its fields by
    their names (`config.image.size`), as it did when the model was written by hand."""
    fields = dict(shared.model_fields)
    if closing not in fields:
        raise TypeError(f"{shared.__qualname__} has no field {closing!r} to put the workloads' fields before")
    following: dict[str | None, list[Added]] = defaultdict(list)
    for field in added:
        if field.name in fields or any(field.name == other.name for held in following.values() for other in held):
            raise TypeError(
                f"two fields of {name} are named {field.name!r}: a workload's field takes a name of its own"
            )
        if field.after is not None and field.after not in fields:
            raise TypeError(f"{field.name} of {name} is placed after {field.after!r}, not a field of {name}")
        following[field.after].append(field)
    definitions: dict[str, Any] = {}
    for held, info in fields.items():
        if held == closing:
            definitions.update({f.name: (f.annotation, f.info) for f in following[None]})
        definitions[held] = (info.annotation, info)
        definitions.update({f.name: (f.annotation, f.info) for f in following[held]})
    return create_model(name, __base__=rules, __module__=rules.__module__, __doc__=doc, **definitions)
