"""Open unions: a field typed as a base class that takes any subclass registered under it, wherever that subclass
is defined (a workload's own folder), so that a new kind of value is a new class and no union to edit.

A base class keeps a `Family` of the subclasses that register themselves (from its `__pydantic_init_subclass__`),
and a field is typed `member_of(Base)`. Validating it passes an instance of a registered subclass through
unchanged; anything else (a dict, as JSON stores it) is validated by pydantic against the union of the registered
subclasses of `Base`, in the order they registered: by the discriminator where the family has one (a gate's
inputs, by `gate`), else as pydantic's smart union picks (metrics, whose registered types share no required field).
Serialising keeps the subclass's own fields (`SerializeAsAny`), as the closed unions did, so stored JSON keeps its
shape. A subclass defined in a module not yet imported is unknown: stored values of it load once its module is
(a workload's module imports its types).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from functools import reduce
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, SerializeAsAny, TypeAdapter


class Family:
    """The subclasses registered under one base class, by key, in the order they registered."""

    def __init__(self, name: str, discriminator: str | None = None):
        self.name = name  # what errors call its members: "metrics type", "gate inputs"
        self.discriminator = discriminator  # the field whose value picks the member, where there is one
        self._members: dict[str, type[BaseModel]] = {}
        self._adapters: dict[tuple[type, ...], TypeAdapter] = {}

    def register(self, key: str, cls: type[BaseModel]) -> None:
        """Add `cls` under `key`. A key already another class's is refused: a stored value must name one type.
        The same class defined again (a module reloaded) replaces itself."""
        held = self._members.get(key)
        if held is not None and (held.__module__, held.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(
                f"{cls.__module__}.{cls.__qualname__} registers as the {self.name} {key!r}, already "
                f"{held.__module__}.{held.__qualname__}'s: give it a key of its own"
            )
        self._members[key] = cls
        self._adapters.clear()

    def members(self, within: type = object) -> tuple[type[BaseModel], ...]:
        """The registered subclasses of `within`, in the order they registered."""
        return tuple(cls for cls in self._members.values() if issubclass(cls, within))

    def validate(self, value: Any, within: type) -> Any:
        """An instance of a registered subclass of `within` as it is; anything else validated as one of them."""
        members = self.members(within)
        if not members:
            raise TypeError(f"no {self.name} is registered under {within.__qualname__}")
        if isinstance(value, members):
            return value
        return self._adapter(members).validate_python(value)

    def _adapter(self, members: tuple[type[BaseModel], ...]) -> TypeAdapter:
        """The closed union of `members` the family stands for now (built once per set of members)."""
        if members not in self._adapters:
            union: Any = reduce(operator.or_, members)  # the union of them, in their order
            if self.discriminator and len(members) > 1:
                union = Annotated[union, Field(discriminator=self.discriminator)]
            self._adapters[members] = TypeAdapter(union)
        return self._adapters[members]


def member_of(base: type[BaseModel], family: Family) -> Any:
    """The type of a field that takes any subclass of `base` registered in `family`, and keeps its fields when
    serialised."""
    check: Callable[[Any], Any] = lambda value: family.validate(value, base)  # noqa: E731
    return Annotated[SerializeAsAny[base], BeforeValidator(check)]
