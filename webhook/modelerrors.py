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

import difflib
import re
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from webhook.modeltypes import (
    KEY,
    MAPPINGS,
    annotation_at,
    choices_of,
    example_for,
    is_union,
    kind_at,
    member_of,
    model_at,
    shown,
    step_into,
    strip,
)

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
_BOUNDS = {
    "greater_than": ("gt", "more than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


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
        current = strip(current)
        if isinstance(seg, str) and is_union(current):
            tags.append((len(clean), seg))
            current = member_of(current, seg)
            continue
        clean.append(seg)
        current = step_into(current, seg)
    return tuple(clean), tuple(tags)


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
        found = shown(members[0].err.get("input"))
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
        return [Problem(loc, str(exc).rstrip("."), _write(kind_at(root, loc), root, loc))]
    if loc and loc[-1] == KEY:
        loc = loc[:-1]
        what = f"the key {shown(found)} is not text" if kind.startswith("str") else "invalid key"
        return [Problem(loc, what, f'write the key as text, in quotes: "{found}"', on_key=True)]
    if kind == "missing":
        return [Problem(loc, "required", _add(root, loc), on_key=True)]
    if kind == "extra_forbidden":
        return [Problem(loc, "unknown key", _rename(root, loc), on_key=True)]
    if kind in ("literal_error", "enum"):
        choices = choices_of(annotation_at(root, loc)) if root is not None else []
        if choices:
            what = f"{shown(found)} is not one of: {', '.join(choices)}"
            near = _nearest(str(found), choices)
            fix = f"write {near} (one of: {', '.join(choices)})" if near else _one_of(choices)
            return [Problem(loc, what, fix)]
        return [Problem(loc, f"{shown(found)} is not an allowed value", _see(loc))]
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
        what = f"{shown(found)} does not match the pattern {pattern}"
        return [Problem(loc, what, _give(root, loc, f"write a value matching {pattern}"))]
    expected = _kind_of_error(err)
    if expected:
        return [
            Problem(loc, f"expected {expected}, found {shown(found)}", _write(expected, root, loc))
        ]
    return [Problem(loc, f"{shown(found)} is not a valid value here", _see(loc))]


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
    if loc and typing.get_origin(annotation_at(root, loc[:-1])) in MAPPINGS:
        fix += f", or remove the {loc[-1]} entry"
    return Problem(loc, f"must be {words} {limit}, found {shown(found)}", fix)


# --- fixes ------------------------------------------------------------------------------------


def _key_name(loc: Loc) -> str:
    return str(loc[-1]) if loc else ""


def _add(root: type[BaseModel] | None, loc: Loc) -> str:
    key = _key_name(loc)
    example = example_for(root, loc)
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
    example = example_for(root, loc)
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
