"""foundry.core.extended: a shared model built with the fields workloads add, each where it is placed, and refusals
that name the field a workload cannot add (one already there, a place that is no field)."""

from __future__ import annotations

from typing import ClassVar

import pytest
from pydantic import BaseModel, ValidationError, model_validator

from foundry.core.extended import Added, extended, fields_of, imported


class Rules(BaseModel):
    @model_validator(mode="after")
    def _no_empty_name(self) -> Rules:
        if not self.name:  # type: ignore[attr-defined]
            raise ValueError("name is empty")
        return self

    def shout(self) -> str:
        return self.name.upper()  # type: ignore[attr-defined]


class Shared(BaseModel):
    name: str
    size: int = 0
    closing: str = ""


class Own(BaseModel):
    placed_after: ClassVar[dict[str, str]] = {"first": "name"}

    first: int = 1
    second: int = 2
    last: int = 3


def test_added_fields_go_where_placed_and_the_rules_hold():
    added = fields_of(Own)
    assert [(f.name, f.after) for f in added] == [("first", "name"), ("second", "name"), ("last", "name")]
    tail = Added("tail", int, Own.model_fields["last"])
    model = extended("Built", Rules, Shared, [*added, tail], "closing", doc="Built here.")
    assert list(model.model_fields) == ["name", "first", "second", "last", "size", "tail", "closing"]
    assert model.__doc__ == "Built here." and model.__module__ == __name__
    assert model(name="a").shout() == "A" and model(name="a").tail == 3
    with pytest.raises(ValidationError, match="name is empty"):
        model(name="")


def test_a_field_already_there_or_placed_after_no_field_is_refused_naming_it():
    size = Added("size", int, Own.model_fields["last"])
    with pytest.raises(TypeError, match="two fields of Built are named 'size'"):
        extended("Built", Rules, Shared, [size], "closing", doc=None)
    nowhere = Added("extra", int, Own.model_fields["last"], after="colour")
    with pytest.raises(TypeError, match="extra of Built is placed after 'colour', not a field of Built"):
        extended("Built", Rules, Shared, [nowhere], "closing", doc=None)


def test_an_import_path_names_module_and_object():
    assert imported("foundry.core.extended:extended") is extended
    with pytest.raises(ValueError, match="names no object"):
        imported("foundry.core.extended")
    with pytest.raises(ImportError, match="foundry.core.extended has no Nothing"):
        imported("foundry.core.extended:Nothing")
