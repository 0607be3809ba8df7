"""The config explained to people: YAML with every field's description as a comment (`foundry config
--defaults`, params.yaml), and one key's description, type, default and allowed values (`foundry config
--explain KEY`). The descriptions are the fields' own, the ones the Prefect form shows."""

from __future__ import annotations

import difflib
import textwrap
import types
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

WIDTH = 118  # the project's line length: comments wrap here, indentation included


def commented_yaml(config: BaseModel) -> str:
    """`config` as YAML that loads to the same values, each section and key preceded by its description."""
    return "\n".join(_lines(config, config.model_dump(mode="json"), "")) + "\n"


def _lines(model: BaseModel, dumped: dict[str, Any], indent: str) -> list[str]:
    lines: list[str] = []
    for key, value in dumped.items():
        field = type(model).model_fields[key]
        lines += _comment(description(field), indent)
        child = getattr(model, key)
        if isinstance(child, BaseModel) and isinstance(value, dict) and value:
            lines.append(f"{indent}{key}:")
            lines += _lines(child, value, indent + "  ")
        else:
            text = yaml.safe_dump({key: value}, sort_keys=False, width=WIDTH - len(indent))
            lines += [indent + line for line in text.splitlines()]
    return lines


def _comment(text: str, indent: str) -> list[str]:
    if not text:
        return []
    width = WIDTH - len(indent) - 2
    return [f"{indent}# {line}" for line in textwrap.wrap(text, width, break_on_hyphens=False)]


def description(field: FieldInfo) -> str:
    """The field's description, else its model's docstring (a section's), else nothing."""
    if field.description:
        return " ".join(field.description.split())
    model = field.annotation if isinstance(field.annotation, type) else None
    if model is not None and issubclass(model, BaseModel) and model.__doc__:
        return " ".join(model.__doc__.split())
    return ""


# --- foundry config --explain KEY ------------------------------------------------------------


class UnknownKey(ValueError):
    """A dotted key that names no section or field; the message lists the close ones."""


def explain(key: str, config: BaseModel) -> str:
    """A section's or a field's description, type, default, allowed values and value in `config`; for a
    section, every field of it in turn."""
    field, value = _resolve(key, config)
    _, default = _resolve(key, type(config)())  # in place: a nested section's default, not its class's
    if isinstance(value, BaseModel):
        head = [key, *[f"  {line}" for line in textwrap.wrap(description(field), WIDTH - 2)]]
        fields = type(value).model_fields
        parts = [
            _field_text(f"{key}.{name}", fields[name], getattr(default, name), getattr(value, name)) for name in fields
        ]
        return "\n".join(head) + "\n\n" + "\n\n".join(parts) + "\n"
    return _field_text(key, field, default, value) + "\n"


def _resolve(key: str, config: BaseModel) -> tuple[FieldInfo, Any]:
    field, value = None, config
    for part in key.split("."):
        if not isinstance(value, BaseModel) or part not in type(value).model_fields:
            raise UnknownKey(_unknown(key, config))
        field, value = type(value).model_fields[part], getattr(value, part)
    if field is None:
        raise UnknownKey(_unknown(key, config))
    return field, value


def _field_text(key: str, field: FieldInfo, default: Any, value: Any) -> str:
    rows = [key]
    rows += [f"  {line}" for line in textwrap.wrap(description(field), WIDTH - 2, break_on_hyphens=False)]
    rows.append(f"  type:    {type_text(field.annotation)}")
    rows.append(f"  default: {_inline(default)}")
    allowed = allowed_text(field)
    if allowed:
        rows.append(f"  allowed: {allowed}")
    rows.append(f"  value:   {_inline(value)}")
    return "\n".join(rows)


def _inline(value: Any) -> str:
    if value is None:  # a variant's `train` key it leaves to `train`
        return "unset"
    value = to_jsonable_python(value)  # a section, or a list of them (search.space)
    return (
        yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6)
        .strip()
        .removesuffix("\n...")
        .strip()
    )


def type_text(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:  # the choices are under allowed
        return " | ".join(dict.fromkeys(type(a).__name__ for a in args))
    if origin in (Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin is not None and args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_text(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation).removeprefix("typing."))


_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "at least", "max_length": "at most"}


def allowed_text(field: FieldInfo) -> str:
    """Bounds (ge, gt, le, lt), lengths and pattern from the field's constraints; a Literal's choices."""
    found = []
    for meta in field.metadata:
        for name, sign in _BOUNDS.items():
            if getattr(meta, name, None) is not None:
                found.append(f"{sign} {getattr(meta, name)}" + (" items" if "length" in name else ""))
        if getattr(meta, "pattern", None):
            found.append(f"matching {meta.pattern}")
    choices = _choices(field.annotation)
    if choices:
        found.append("one of " + ", ".join(repr(c) for c in choices))
    return "; ".join(found)


def _choices(annotation: Any) -> list[Any]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return list(args)
    return [c for a in args for c in _choices(a)] if origin is not None else []


def _unknown(key: str, config: BaseModel) -> str:
    keys = list(_all_keys(config, ""))
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(key, keys, n=5, cutoff=0.6)
    close += [k for k in keys if k.rsplit(".", 1)[-1] == leaf and k not in close][: 8 - len(close)]
    hint = f"; close: {', '.join(close)}" if close else f"; sections: {', '.join(type(config).model_fields)}"
    return f"unknown config key {key!r}{hint}"


def _all_keys(model: BaseModel, prefix: str):
    for name in type(model).model_fields:
        yield prefix + name
        child = getattr(model, name)
        if isinstance(child, BaseModel):
            yield from _all_keys(child, f"{prefix}{name}.")
