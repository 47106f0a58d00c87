"""The rule files' YAML reader: one pass over the parser's events, refusing what rule files
may not use (anchors, aliases, merge keys, custom tags, deep nesting) where it appears.

`documents` yields each document's data with the place of every setting in it, which
`files` turns into `file:line:col` problems.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import yaml

from webhook.yamlinput import deeper_than_at

__all__ = ["MAX_DEPTH", "Path_", "Refused", "Where", "documents"]

Path_ = tuple[str | int, ...]

# Rule files nest about 8 levels; the limit keeps every later recursive walk shallow.
MAX_DEPTH = 64
_NO_ANCHORS = (
    "is not allowed in rule files: anchors and aliases can expand a small file into gigabytes. "
    "Fix: write the settings out, or put shared settings in `rules` and differences in "
    "`overrides`"
)
_NO_TAGS = "is not allowed in rule files. Fix: remove the tag and write the plain value"
_TOO_DEEP = (
    f"nested deeper than {MAX_DEPTH} levels. Fix: rule files nest about 8 levels; look for an "
    "unclosed [ or { or a runaway indent before this point"
)
_STR, _SEQ, _MAP = (f"tag:yaml.org,2002:{t}" for t in ("str", "seq", "map"))
_NODE_EVENTS = frozenset({yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent})
# libyaml's parser when built in (several times faster); the pure-Python one otherwise.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Where(NamedTuple):
    """Where a setting is written: its file, the 1-based line and column of its key (of the
    item, for a list item), and those of its value. A value that is a block mapping or list
    starts on a later line: its place is its key's. `str()` gives `file:line:col` of the key."""

    file: str
    line: int
    column: int
    value_line: int
    value_column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class Refused(Exception):
    """A construct rule files may not use, at a 1-based line and column; the message ends with
    its fix."""

    def __init__(self, line: int, column: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


@dataclass
class _Frame:
    """An open mapping or sequence while the event stream is read."""

    value: dict[Any, Any] | list[Any]
    path: Path_
    key: Any = None
    key_line: int = 0
    key_column: int = 0
    has_key: bool = False


def documents(text: str, where: str) -> Iterator[tuple[Any, tuple[int, int], dict[Path_, Where]]]:
    """(data, (line, column) where it starts, field path -> `Where`) for each YAML document of
    a file.

    One pass over the parser's events builds the data and the line table together: half the
    work of composing and then constructing, no recursion (so no nesting can overflow a stack),
    and anchors, aliases and merge keys are refused where they appear, before any expansion.
    Scalars get the same tags and values as `yaml.safe_load`.
    """
    deep = deeper_than_at(text, MAX_DEPTH)  # before libyaml, whose own cap differs by release
    if deep is not None:
        raise Refused(*deep, _TOO_DEEP)
    loader = _Loader(text)
    try:
        stack: list[_Frame] = []
        lines: dict[Path_, Where] = {}
        root: Any = None
        root_at = (1, 1)
        while True:
            event = loader.get_event()
            kind = type(event)
            if kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
                stack.pop()
                continue
            if kind not in _NODE_EVENTS:
                if kind is yaml.DocumentStartEvent:
                    stack, lines, root = [], {}, None
                elif kind is yaml.DocumentEndEvent:
                    yield root, root_at, lines
                elif kind is yaml.StreamEndEvent:
                    return
                elif kind is yaml.AliasEvent:
                    mark = event.start_mark
                    raise Refused(
                        mark.line + 1, mark.column + 1, f"YAML alias *{event.anchor} {_NO_ANCHORS}"
                    )
                continue
            mark = event.start_mark
            line, column = mark.line + 1, mark.column + 1
            if event.anchor is not None:
                raise Refused(line, column, f"YAML anchor &{event.anchor} {_NO_ANCHORS}")
            value: Any
            path: Path_
            if kind is yaml.ScalarEvent:
                value = _scalar(loader, event, line, column)
            else:
                value = _collection(event, line, column, len(stack))
            if not stack:
                root, root_at, path = value, (line, column), ()
                lines.setdefault(path, Where(where, line, column, line, column))
            else:
                placed = _attach(stack[-1], value, event, line, column, where, lines)
                if placed is None:
                    continue  # a mapping's key: its value comes next
                path = placed
            if kind is not yaml.ScalarEvent:
                stack.append(_Frame(value, path))
    finally:
        loader.dispose()


def _collection(event: Any, line: int, column: int, depth: int) -> list[Any] | dict[Any, Any]:
    """The empty list or mapping a sequence or mapping start event opens: refused with a tag
    other than the plain one (no custom types) or deeper than MAX_DEPTH."""
    sequence = type(event) is yaml.SequenceStartEvent
    if event.tag not in (None, "!", _SEQ if sequence else _MAP):
        raise Refused(line, column, f"the YAML tag {event.tag} {_NO_TAGS}")
    if depth >= MAX_DEPTH:
        raise Refused(line, column, _TOO_DEEP)
    return [] if sequence else {}


def _attach(
    top: _Frame,
    value: Any,
    event: Any,
    line: int,
    column: int,
    where: str,
    lines: dict[Path_, Where],
) -> Path_ | None:
    """Puts a node's value into the collection open above it and records where it is:
    appended to a list, or set under the key read just before it. A mapping's key is kept
    for the value that follows (None then: nothing was placed yet)."""
    scalar = type(event) is yaml.ScalarEvent
    if isinstance(top.value, list):
        path: Path_ = (*top.path, len(top.value))
        top.value.append(value)
        lines.setdefault(path, Where(where, line, column, line, column))
        return path
    if not top.has_key:
        if not scalar:
            raise Refused(
                line,
                column,
                "a mapping key must be a plain value. Fix: write the key as plain text",
            )
        top.key, top.key_line, top.key_column = value, line, column
        top.has_key = True
        return None
    # A key's path is its value as read (what validation's locations hold).
    path = (*top.path, top.key)
    top.value[top.key] = value
    if not scalar and not event.flow_style:
        line, column = top.key_line, top.key_column  # a block: at its key
    lines[path] = Where(where, top.key_line, top.key_column, line, column)
    top.has_key = False
    return path


def _scalar(loader: Any, event: yaml.ScalarEvent, line: int, column: int) -> Any:
    """A scalar's value, tagged the way PyYAML's composer tags it."""
    explicit = event.tag not in (None, "!")
    tag = str(event.tag)
    if not explicit:
        tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
    if tag == _STR:
        return event.value  # what SafeConstructor returns for it, minus building a node
    if tag == "tag:yaml.org,2002:merge":
        raise Refused(
            line,
            column,
            "YAML merge keys (<<) are not allowed in rule files. Fix: write the keys out in "
            "this mapping",
        )
    construct = _Loader.yaml_constructors.get(tag)
    if construct is None:
        raise Refused(line, column, f"the YAML tag {tag} {_NO_TAGS}")
    start: Any = event.start_mark  # libyaml's Mark type: the same fields as PyYAML's
    end: Any = event.end_mark
    node = yaml.ScalarNode(tag, event.value, start, end, event.style)
    try:
        return construct(loader, node)
    except Exception:  # `!!int x` or a date like 2024-13-45: ValueError, not YAMLError
        short = tag.replace("tag:yaml.org,2002:", "!!")
        fix = (
            "remove the tag, or write a value of that type"
            if explicit
            else f"quote it to keep it as text: {event.value[:40]!r}"
        )
        raise Refused(
            line, column, f"{event.value[:40]!r} is not a valid {short}. Fix: {fix}"
        ) from None
