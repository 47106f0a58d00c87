"""pydantic's validation errors said in the project's own words.

A rule file, a cluster snapshot or a test case that fails validation is reported as
`field.path: what is wrong`, built from each error's type, context and input: never from
pydantic's message text, which changes between releases and speaks of Python ("Input should be a
valid dictionary or instance of RuleSet"). A type this module does not know falls back to a
plain "not a valid value", never to pydantic's text.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

__all__ = ["annotation_at", "describe", "model_at"]

# What a value of each kind is called, by the prefix of pydantic's error type (`int_parsing`,
# `dict_type`, `model_attributes_type`, ...).
_KINDS = {
    "int": "a whole number",
    "float": "a number",
    "decimal": "a number",
    "bool": "true or false",
    "string": "text",
    "str": "text",
    "dict": "a mapping",
    "model": "a mapping",
    "model_attributes": "a mapping",
    "dataclass": "a mapping",
    "list": "a list",
    "tuple": "a list",
    "set": "a list",
    "frozen_set": "a list",
    "iterable": "a list",
    "none": "nothing (null)",
}
_CONTAINERS = (
    list,
    dict,
    tuple,
    set,
    frozenset,
    collections.abc.Mapping,
    collections.abc.Sequence,
)
_BOUNDS = {
    "greater_than": ("gt", "more than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


def describe(err: Mapping[str, Any], root: type[BaseModel] | None = None) -> str:
    """`path: problem` for one entry of `ValidationError.errors()`; `root` is the model that
    was validated, so unknown keys and closed choices can list what is allowed."""
    loc = tuple(err.get("loc", ()))
    where = ".".join(str(p) for p in loc) or "(top)"
    return f"{where}: {_problem(err, loc, root)}"


def _problem(err: Mapping[str, Any], loc: tuple[Any, ...], root: type[BaseModel] | None) -> str:
    kind = str(err.get("type", ""))
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    found = err.get("input")
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])  # the project's own validator said it
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        parent = model_at(root, loc[:-1]) if root is not None else None
        if parent is None:
            return "unknown key"
        keys = [f.alias or name for name, f in parent.model_fields.items()]
        return f"unknown key; expected one of: {', '.join(keys)}"
    if kind in ("literal_error", "enum"):
        choices = _choices(annotation_at(root, loc)) if root is not None else []
        if choices:
            return f"{_show(found)} is not one of: {', '.join(choices)}"
        return f"{_show(found)} is not an allowed value"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return f"must be {words} {ctx.get(key)}, found {_show(found)}"
    if kind in ("string_too_short", "too_short"):
        return f"must have at least {ctx.get('min_length')} {_units(kind)}"
    if kind in ("string_too_long", "too_long"):
        return f"must have at most {ctx.get('max_length')} {_units(kind)}"
    if kind == "string_pattern_mismatch":
        return f"{_show(found)} does not match the pattern {ctx.get('pattern')}"
    for suffix in ("_parsing", "_type", "_from_float", "_fraction"):
        if kind.endswith(suffix) and kind[: -len(suffix)] in _KINDS:
            return f"expected {_KINDS[kind[: -len(suffix)]]}, found {_show(found)}"
    return f"{_show(found)} is not a valid value here"


def _units(kind: str) -> str:
    return "characters" if kind.startswith("string") else "items"


def _show(value: Any) -> str:
    """The value found, short: a user recognises it from their file."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _choices(annotation: Any) -> list[str]:
    """The values a Literal (or an Enum) annotation allows, as they are written in a file."""
    if annotation is None:
        return []
    if typing.get_origin(annotation) is typing.Literal:
        return [str(a) for a in typing.get_args(annotation)]
    if isinstance(annotation, type) and hasattr(annotation, "__members__"):
        return [str(getattr(m, "value", m)) for m in annotation.__members__.values()]
    return []


def _strip_optional(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def annotation_at(root: type[BaseModel] | None, loc: tuple[Any, ...]) -> Any:
    """The annotation of the field the path `loc` names under `root`, or None."""
    current: Any = root
    for seg in loc:
        current = _strip_optional(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            found = next(
                (f for name, f in current.model_fields.items() if seg in (name, f.alias)), None
            )
            if found is None:
                return None
            current = found.annotation
        elif typing.get_origin(current) in _CONTAINERS:
            args = typing.get_args(current)
            current = args[-1] if args else None
        else:
            return None
    return _strip_optional(current)


def model_at(root: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model the path `loc` points into, to say which keys it takes."""
    found = annotation_at(root, loc)
    return found if isinstance(found, type) and issubclass(found, BaseModel) else None
