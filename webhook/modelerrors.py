"""pydantic's validation errors said in the project's own words, each with how to fix it.

A rule file, a cluster snapshot or a test case that fails validation is reported as
`field.path: what is wrong`, built from each error's type, context and input: never from
pydantic's message text, which changes between releases and speaks of Python ("Input should be a
valid dictionary or instance of RuleSet"). A type this module does not know falls back to a
plain "not a valid value", never to pydantic's text.

Rule files get more (`problems`): one `Problem` per thing to change, saying what is wrong and how
to fix it (the nearest allowed key, the type expected with an example taken from the field's
examples or default, a positive number or removing the entry), and whether the key or its
value is at fault, so the loader can point at the right column. pydantic reports a value that
fits no member of a union once per member (`str`, `list[str]`, `function-after[...]`): those are
folded into one problem, or into the member whose shape the value has.
"""

from __future__ import annotations

import collections.abc
import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

__all__ = [
    "Invalid",
    "Nested",
    "Problem",
    "annotation_at",
    "describe",
    "model_at",
    "problems",
]

Loc = tuple[str | int, ...]

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
_TYPE_SUFFIXES = ("_parsing", "_type", "_from_float", "_fraction")
_CONTAINERS = (
    list,
    dict,
    tuple,
    set,
    frozenset,
    collections.abc.Mapping,
    collections.abc.Sequence,
)
_MAPPINGS = (dict, collections.abc.Mapping)
_BOUNDS = {
    "greater_than": ("gt", "more than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}
_KEY = "[key]"  # pydantic's last location segment when a mapping's key, not its value, is wrong


class Invalid(ValueError):
    """A validator's own finding: what is wrong and how to fix it, and where below the value
    validated it lies (`at`, keys as a file writes them), so the report points at it."""

    def __init__(self, what: str, fix: str, at: Loc = ()) -> None:
        super().__init__(what)
        self.what = what
        self.fix = fix
        self.at = at

    def below(self, *at: str | int) -> Invalid:
        """The same finding, one level further out: `at` leads to where it was."""
        return Invalid(self.what, self.fix, (*at, *self.at))


class Nested(ValueError):
    """Errors of values a validator checked against other models (an override's partial rule
    settings): reported one by one at their own place below each group's prefix, in that
    model's terms."""

    def __init__(self, *groups: tuple[Loc, type[BaseModel], list[Any]]) -> None:
        self.groups = groups
        super().__init__(
            "; ".join(
                f"{_path(prefix)}.{describe(e, root)}"
                for prefix, root, errors in groups
                for e in errors
            )
        )


@dataclass(frozen=True)
class Problem:
    """One thing to change in a file: the field path as the file writes it, what is wrong, how
    to fix it, and whether the key itself (an unknown key; a required one missing under it) is
    what to look at rather than its value."""

    loc: Loc
    what: str
    fix: str
    on_key: bool = False

    @property
    def path(self) -> str:
        return _path(self.loc)

    def __str__(self) -> str:
        return f"{self.path}: {self.what}. Fix: {self.fix}"


def describe(err: Mapping[str, Any], root: type[BaseModel] | None = None) -> str:
    """`path: problem. Fix: ...` for one entry of `ValidationError.errors()`; `root` is the
    model that was validated, so unknown keys and closed choices can list what is allowed."""
    loc, _ = _walk(root, tuple(err.get("loc", ())))
    return str(_one(err, loc, root)[0])


def problems(errors: Iterable[Mapping[str, Any]], root: type[BaseModel]) -> list[Problem]:
    """Every problem `ValidationError.errors()` holds, each once, with its fix; in pydantic's
    order (the caller sorts them by where they are)."""
    return _solve([_Item(err, *_walk(root, tuple(err.get("loc", ())))) for err in errors], root)


# --- locations: pydantic's, less its union-member tags ----------------------------------------


@dataclass(frozen=True)
class _Item:
    err: Mapping[str, Any]
    loc: Loc  # without union tags
    tags: tuple[tuple[int, str], ...]  # (position in loc, tag) of each union member chosen


def _walk(root: type[BaseModel] | None, loc: Loc) -> tuple[Loc, tuple[tuple[int, str], ...]]:
    """The location without pydantic's union-member tags, and where each tag stood."""
    clean: list[str | int] = []
    tags: list[tuple[int, str]] = []
    current: Any = root
    for seg in loc:
        current = _strip(current)
        if isinstance(seg, str) and _is_union(current):
            tags.append((len(clean), seg))
            current = _member(current, seg)
            continue
        clean.append(seg)
        current = _step(current, seg)
    return tuple(clean), tuple(tags)


def _step(current: Any, seg: str | int) -> Any:
    if _is_union(current):  # a key below a union: the member model that has it
        models = [_strip(a) for a in _union_args(current)]
        current = next((m for m in models if _is_model(m) and _field(m, seg)), None)
    if _is_model(current):
        found = _field(current, seg)
        return found.annotation if found is not None else None
    if typing.get_origin(current) in _CONTAINERS:
        args = typing.get_args(current)
        if seg == _KEY:
            return args[0] if args else None
        return args[-1] if args else None
    return None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _field(model: type[BaseModel], seg: str | int) -> FieldInfo | None:
    return next((f for name, f in model.model_fields.items() if seg in (name, f.alias)), None)


def _strip(annotation: Any) -> Any:
    """The annotation without Annotated metadata and without an Optional's None."""
    while True:
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if _union_args(annotation):
            args = [a for a in _union_args(annotation) if a is not type(None)]
            if len(args) == 1:
                annotation = args[0]
                continue
        return annotation


def _union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return ()


def _is_union(annotation: Any) -> bool:
    return len([a for a in _union_args(annotation) if a is not type(None)]) > 1


def _member(union: Any, tag: str) -> Any:
    """The member of `union` pydantic's tag names: `str`, `list[str]`, `ReplicaFactor` or
    `function-after[_parse(), ReplicaFactor]`."""
    for arg in _union_args(union):
        stripped = _strip(arg)
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
        current = _step(_strip(current), seg)
        if current is None:
            return None
    return _strip(current)


def model_at(root: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model the path `loc` points into, to say which keys it takes (the model
    member of a union of text and a model)."""
    found = annotation_at(root, loc)
    if _is_union(found):
        models = [m for m in (_strip(a) for a in _union_args(found)) if _is_model(m)]
        found = models[0] if len(models) == 1 else None
    return found if _is_model(found) else None


def _path(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "(top)"


# --- union members folded -----------------------------------------------------------------------


def _solve(items: list[_Item], root: type[BaseModel] | None) -> list[Problem]:
    """Problems of errors, a union's members folded: the member whose shape the value has (its
    errors lie below the union's place, or are no type mismatch) speaks for the union; when the
    value has no member's shape, one problem names every shape that would do."""
    out: list[Problem] = []
    unions: dict[Loc, list[_Item]] = {}
    for item in items:
        if item.tags:
            unions.setdefault(item.loc[: item.tags[0][0]], []).append(item)
        else:
            out.extend(_one(item.err, item.loc, root))
    for place, members in unions.items():
        by_tag: dict[str, list[_Item]] = {}
        for m in members:
            by_tag.setdefault(m.tags[0][1], []).append(m)
        shaped = [ms for ms in by_tag.values() if not all(_mismatch(m, place) for m in ms)]
        if shaped:
            chosen = min(shaped, key=len)
            out.extend(_solve([_Item(m.err, m.loc, m.tags[1:]) for m in chosen], root))
            continue
        kinds = list(dict.fromkeys(_kind_of_error(m.err) for m in members))
        kinds_text = " or ".join(k for k in kinds if k) or "another kind of value"
        found = _show(members[0].err.get("input"))
        out.append(
            Problem(place, f"expected {kinds_text}, found {found}", _write(kinds_text, root, place))
        )
    return out


def _mismatch(item: _Item, place: Loc) -> bool:
    """The error says only that the value is not of this member's type."""
    kind = str(item.err.get("type", ""))
    return item.loc == place and kind.endswith(_TYPE_SUFFIXES)


def _kind_of_error(err: Mapping[str, Any]) -> str:
    kind = str(err.get("type", ""))
    for suffix in _TYPE_SUFFIXES:
        if kind.endswith(suffix) and kind[: -len(suffix)] in _KINDS:
            return _KINDS[kind[: -len(suffix)]]
    return ""


# --- one error ------------------------------------------------------------------------------


def _one(err: Mapping[str, Any], loc: Loc, root: type[BaseModel] | None) -> list[Problem]:
    kind = str(err.get("type", ""))
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    found = err.get("input")
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        exc = ctx["error"]
        if isinstance(exc, Nested):
            return [
                Problem((*loc, *prefix, *p.loc), p.what, p.fix, p.on_key)
                for prefix, model, errors in exc.groups
                for p in problems(errors, model)
            ]
        if isinstance(exc, Invalid):
            return [Problem((*loc, *exc.at), exc.what, exc.fix)]
        # A validator of a library: its words, and what the field takes.
        return [Problem(loc, str(exc).rstrip("."), _write(_kind_at(root, loc), root, loc))]
    if loc and loc[-1] == _KEY:
        loc = loc[:-1]
        what = f"the key {_show(found)} is not text" if kind.startswith("str") else "invalid key"
        return [Problem(loc, what, f'write the key as text, in quotes: "{found}"', on_key=True)]
    if kind == "missing":
        return [Problem(loc, "required", _add(root, loc), on_key=True)]
    if kind == "extra_forbidden":
        return [Problem(loc, "unknown key", _rename(root, loc), on_key=True)]
    if kind in ("literal_error", "enum"):
        choices = _choices(annotation_at(root, loc)) if root is not None else []
        if choices:
            what = f"{_show(found)} is not one of: {', '.join(choices)}"
            near = _nearest(str(found), choices)
            fix = f"write {near} (one of: {', '.join(choices)})" if near else _one_of(choices)
            return [Problem(loc, what, fix)]
        return [Problem(loc, f"{_show(found)} is not an allowed value", _see(loc))]
    if kind in _BOUNDS:
        return [_bound(kind, ctx, found, loc, root)]
    if kind in ("string_too_short", "too_short"):
        n = ctx.get("min_length")
        if kind == "string_too_short" and n == 1:
            return [Problem(loc, "must not be empty", _give(root, loc, "give it a value"))]
        what = f"must have at least {n} {_units(kind, n)}"
        return [Problem(loc, what, _give(root, loc, f"give at least {n} {_units(kind, n)}"))]
    if kind in ("string_too_long", "too_long"):
        n = ctx.get("max_length")
        what = f"must have at most {n} {_units(kind, n)}"
        return [Problem(loc, what, f"shorten it to at most {n} {_units(kind, n)}")]
    if kind == "string_pattern_mismatch":
        pattern = ctx.get("pattern")
        what = f"{_show(found)} does not match the pattern {pattern}"
        return [Problem(loc, what, _give(root, loc, f"write a value matching {pattern}"))]
    expected = _kind_of_error(err)
    if expected:
        return [
            Problem(loc, f"expected {expected}, found {_show(found)}", _write(expected, root, loc))
        ]
    return [Problem(loc, f"{_show(found)} is not a valid value here", _see(loc))]


def _bound(
    kind: str, ctx: Mapping[str, Any], found: Any, loc: Loc, root: type[BaseModel] | None
) -> Problem:
    key, words = _BOUNDS[kind]
    limit = ctx.get(key)
    noun = "whole number" if annotation_at(root, loc) is int else "number"
    if kind == "greater_than" and limit == 0:
        fix = f"give a positive {noun}"
    else:
        fix = f"give a {noun} {words.replace('at ', 'of at ')} {limit}"
    if loc and typing.get_origin(annotation_at(root, loc[:-1])) in _MAPPINGS:
        fix += f", or remove the {loc[-1]} entry"
    return Problem(loc, f"must be {words} {limit}, found {_show(found)}", fix)


# --- fixes ------------------------------------------------------------------------------------


def _key_name(loc: Loc) -> str:
    return str(loc[-1]) if loc else ""


def _add(root: type[BaseModel] | None, loc: Loc) -> str:
    key = _key_name(loc)
    example = _example(root, loc)
    return f"add {key}: {example}" if example else f"add {key}"


def _rename(root: type[BaseModel] | None, loc: Loc) -> str:
    parent = model_at(root, loc[:-1]) if root is not None else None
    if parent is None:
        return "remove it"
    keys = [f.alias or name for name, f in parent.model_fields.items()]
    near = _nearest(_key_name(loc), keys)
    listed = ", ".join(keys)
    if near:
        return f"did you mean {near}? The keys here are: {listed}"
    return f"remove it, or use one of the keys here: {listed}"


def _write(expected: str, root: type[BaseModel] | None, loc: Loc) -> str:
    """`write <kind>, e.g. key: example` for a value of the wrong kind."""
    if not expected:
        return _see(loc)
    return _give(root, loc, f"write {expected}")


def _give(root: type[BaseModel] | None, loc: Loc, head: str) -> str:
    example = _example(root, loc)
    if not example:
        return head
    if loc and isinstance(loc[-1], str):
        return f"{head}, e.g. {loc[-1]}: {example}"
    return f"{head}, e.g. {example}"


def _one_of(choices: list[str]) -> str:
    return f"write one of: {', '.join(choices)}"


def _see(loc: Loc) -> str:
    key = _key_name(loc) or "this file"
    return f"see what {key} takes in the rules reference (gpu-admission rules schema)"


def _nearest(word: str, choices: list[str]) -> str | None:
    """The allowed word the user most likely meant: the same but for case and separators
    (max_size, MaxSize: maxSize), else the closest spelling."""

    def plain(s: str) -> str:
        return re.sub(r"[-_ .]", "", s.lower())

    same = [c for c in choices if plain(c) == plain(word)]
    if same:
        return same[0]
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


def _units(kind: str, n: Any) -> str:
    unit = "character" if kind.startswith("string") else "item"
    return unit if n == 1 else unit + "s"


# --- examples -----------------------------------------------------------------------------------


def _example(root: type[BaseModel] | None, loc: Loc) -> str:
    """A value the field at `loc` takes, as a file writes it: the field's first example, else
    its default, else an item of its container's; "" when none is short enough to show."""
    value = _example_value(root, loc)
    if value is None:
        return ""
    text = _flow(value)
    return text if len(text) <= 60 else ""


def _example_value(root: type[BaseModel] | None, loc: Loc) -> Any:
    if root is None or not loc:
        return None
    parent = model_at(root, loc[:-1])
    field = _field(parent, loc[-1]) if parent is not None else None
    if field is not None:
        if field.examples:
            return field.examples[0]
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump(by_alias=True, mode="json", exclude_defaults=False)
        if default not in (None, "", [], {}):
            return default
        choices = _choices(_strip(field.annotation))
        if choices:
            return choices[0]
    else:  # an item of a list or a value of a mapping: an item of the container's example
        outer = _example_value(root, loc[:-1])
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


def _flow(value: Any) -> str:
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
            entry = f"{_flow(k)}: {_flow(v)}"
            if shown and sum(len(e) + 2 for e in (*shown, entry)) > 48:
                break
            shown.append(entry)
        return "{" + ", ".join(shown) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    text = str(value)
    plain = _PLAIN.fullmatch(text) and not _NUMBER.fullmatch(text) and text.lower() not in _WORDS
    return text if plain else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- words ----------------------------------------------------------------------------------


def _kind_at(root: type[BaseModel] | None, loc: Loc) -> str:
    """What the field at `loc` takes, in words ("" when unknown)."""
    annotation = annotation_at(root, loc) if root is not None else None
    return _kind_of_annotation(annotation)


def _kind_of_annotation(annotation: Any) -> str:
    if annotation is None:
        return ""
    if _is_union(annotation):
        kinds = [_kind_of_annotation(_strip(a)) for a in _union_args(annotation)]
        return " or ".join(dict.fromkeys(k for k in kinds if k))
    if typing.get_origin(annotation) is typing.Literal:
        return "one of: " + ", ".join(_choices(annotation))
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "a whole number"
    if annotation is float:
        return "a number"
    if annotation is str:
        return "text"
    origin = typing.get_origin(annotation)
    if origin in _MAPPINGS or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "a mapping"
    if origin in _CONTAINERS:
        return "a list"
    return ""


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
