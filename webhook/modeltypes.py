"""What a pydantic field's annotation says, for messages about a value written for it.

The annotation a path names (through unions, Optional and Annotated), the value it takes in
words, its choices, an example as a rule file writes it, and a value found shown short: what
`modelerrors` builds each problem and its fix from.
"""

from __future__ import annotations

import collections.abc
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

__all__ = [
    "CONTAINERS",
    "KEY",
    "MAPPINGS",
    "annotation_at",
    "choices_of",
    "example_for",
    "field_of",
    "flow",
    "is_model",
    "is_union",
    "kind_at",
    "kind_of_annotation",
    "member_of",
    "model_at",
    "shown",
    "step_into",
    "strip",
    "union_args",
]

Loc = tuple[str | int, ...]

CONTAINERS = (
    list,
    dict,
    tuple,
    set,
    frozenset,
    collections.abc.Mapping,
    collections.abc.Sequence,
)
MAPPINGS = (dict, collections.abc.Mapping)
KEY = "[key]"  # pydantic's last location segment when a mapping's key, not its value, is wrong


def step_into(current: Any, seg: str | int) -> Any:
    if is_union(current):  # a key below a union: the member model that has it
        models = [strip(a) for a in union_args(current)]
        current = next((m for m in models if is_model(m) and field_of(m, seg)), None)
    if is_model(current):
        found = field_of(current, seg)
        return found.annotation if found is not None else None
    if typing.get_origin(current) in CONTAINERS:
        args = typing.get_args(current)
        if seg == KEY:
            return args[0] if args else None
        return args[-1] if args else None
    return None


def is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def field_of(model: type[BaseModel], seg: str | int) -> FieldInfo | None:
    return next((f for name, f in model.model_fields.items() if seg in (name, f.alias)), None)


def strip(annotation: Any) -> Any:
    """The annotation without Annotated metadata and without an Optional's None."""
    while True:
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if union_args(annotation):
            args = [a for a in union_args(annotation) if a is not type(None)]
            if len(args) == 1:
                annotation = args[0]
                continue
        return annotation


def union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return ()


def is_union(annotation: Any) -> bool:
    return len([a for a in union_args(annotation) if a is not type(None)]) > 1


def member_of(union: Any, tag: str) -> Any:
    """The member of `union` pydantic's tag names: `str`, `list[str]`, `ReplicaFactor` or
    `function-after[_parse(), ReplicaFactor]`."""
    for arg in union_args(union):
        stripped = strip(arg)
        if isinstance(stripped, type) and issubclass(stripped, BaseModel):
            if tag == stripped.__name__ or tag.endswith(f" {stripped.__name__}]"):
                return arg
        elif tag == getattr(stripped, "__name__", None) or tag == str(stripped):
            return arg
    return None


def annotation_at(root: type[BaseModel] | None, loc: tuple[Any, ...]) -> Any:
    """The annotation of the field the path `loc` names under `root`, or None."""
    current: Any = root
    for seg in loc:
        current = step_into(strip(current), seg)
        if current is None:
            return None
    return strip(current)


def model_at(root: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model the path `loc` points into, to say which keys it takes (the model
    member of a union of text and a model)."""
    found = annotation_at(root, loc)
    if is_union(found):
        models = [m for m in (strip(a) for a in union_args(found)) if is_model(m)]
        found = models[0] if len(models) == 1 else None
    return found if is_model(found) else None


# --- examples -----------------------------------------------------------------------------------


def example_for(root: type[BaseModel] | None, loc: Loc) -> str:
    """A value the field at `loc` takes, as a file writes it: the field's first example, else
    its default, else an item of its container's; "" when none is short enough to show."""
    value = example_value(root, loc)
    if value is None:
        return ""
    text = flow(value)
    return text if len(text) <= 60 else ""


def example_value(root: type[BaseModel] | None, loc: Loc) -> Any:
    if root is None or not loc:
        return None
    parent = model_at(root, loc[:-1])
    field = field_of(parent, loc[-1]) if parent is not None else None
    if field is not None:
        if field.examples:
            return field.examples[0]
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump(by_alias=True, mode="json", exclude_defaults=False)
        if default not in (None, "", [], {}):
            return default
        choices = choices_of(strip(field.annotation))
        if choices:
            return choices[0]
    else:  # an item of a list or a value of a mapping: an item of the container's example
        outer = example_value(root, loc[:-1])
        if isinstance(outer, list) and outer:
            return outer[0]
        if isinstance(outer, dict) and outer:
            return next(iter(outer.values()))
    annotation = annotation_at(root, loc)
    return next((v for t, v in _EXAMPLE_OF if annotation is t), None)


_EXAMPLE_OF: tuple[tuple[type, Any], ...] = ((int, 1), (float, 0.5), (bool, True))


_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/*\-]*")
_NUMBER = re.compile(r"[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?|0x[0-9a-fA-F]+|0o?[0-7]+")
_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"})


def flow(value: Any) -> str:
    """A value in YAML flow style, quoting only text YAML would read as something else."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, Mapping):  # its first entries, as many as read at a glance
        shown: list[str] = []
        for k, v in value.items():
            entry = f"{flow(k)}: {flow(v)}"
            if shown and sum(len(e) + 2 for e in (*shown, entry)) > 48:
                break
            shown.append(entry)
        return "{" + ", ".join(shown) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    text = str(value)
    plain = _PLAIN.fullmatch(text) and not _NUMBER.fullmatch(text) and text.lower() not in _WORDS
    return text if plain else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- words ----------------------------------------------------------------------------------


def kind_at(root: type[BaseModel] | None, loc: Loc) -> str:
    """What the field at `loc` takes, in words ("" when unknown)."""
    annotation = annotation_at(root, loc) if root is not None else None
    return kind_of_annotation(annotation)


def kind_of_annotation(annotation: Any) -> str:
    if annotation is None:
        return ""
    if is_union(annotation):
        kinds = [kind_of_annotation(strip(a)) for a in union_args(annotation)]
        return " or ".join(dict.fromkeys(k for k in kinds if k))
    if typing.get_origin(annotation) is typing.Literal:
        return "one of: " + ", ".join(choices_of(annotation))
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "a whole number"
    if annotation is float:
        return "a number"
    if annotation is str:
        return "text"
    origin = typing.get_origin(annotation)
    if origin in MAPPINGS or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "a mapping"
    if origin in CONTAINERS:
        return "a list"
    return ""


def shown(value: Any) -> str:
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


def choices_of(annotation: Any) -> list[str]:
    """The values a Literal (or an Enum) annotation allows, as they are written in a file."""
    if annotation is None:
        return []
    if typing.get_origin(annotation) is typing.Literal:
        return [str(a) for a in typing.get_args(annotation)]
    if isinstance(annotation, type) and hasattr(annotation, "__members__"):
        return [str(getattr(m, "value", m)) for m in annotation.__members__.values()]
    return []
