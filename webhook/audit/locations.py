"""Where a finding is in its file: the line and column of the YAML node its field path names.

The manifest reader keeps each document's composed node tree (the C loader composes it with
marks anyway, before building the object), so finding a line costs a walk down the path and
only for objects that have findings. A path that leads past what the document holds (a field
the rule wants added, an index the patch created) stops at the deepest node that exists: a
missing `limits.memory` points at `limits`, a missing `resources` at the container.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

__all__ = [
    "Location",
    "locate",
    "locate_segments",
    "mark_location",
    "parse_path",
    "pointer_segments",
]


@dataclass(frozen=True, slots=True)
class Location:
    """A place in a file, 1-based as editors and SARIF count (YAML marks count from 0)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "column": self.column}


def mark_location(mark: Any, file: str) -> Location:
    """The Location of a yaml Mark (from the C or the Python loader)."""
    return Location(file, mark.line + 1, mark.column + 1)


def parse_path(path: str) -> list[str | int]:
    """The segments of a kubectl-style field path, as `engine.fields.dotted` writes them:
    `spec.containers[0].resources.limits["nvidia.com/gpu"]` -> spec, containers, 0, ...

    A malformed tail (an unclosed bracket) ends the path there: the location falls back to
    what was read so far, it never fails.
    """
    segments: list[str | int] = []
    i, end = 0, len(path)
    while i < end:
        char = path[i]
        if char == ".":
            i += 1
        elif path.startswith('["', i):
            close = path.find('"]', i + 2)
            if close < 0:
                break
            segments.append(path[i + 2 : close])
            i = close + 2
        elif char == "[":
            close = path.find("]", i)
            if close < 0:
                break
            token = path[i + 1 : close]
            segments.append(int(token) if token.isdigit() else token)
            i = close + 1
        else:
            stop = i
            while stop < end and path[stop] not in ".[":
                stop += 1
            segments.append(path[i:stop])
            i = stop
    return segments


def _child(node: yaml.Node, segment: str | int) -> tuple[yaml.Node, Any] | None:
    """The node a segment leads to and the mark that names it (the key of a mapping entry,
    the item itself in a sequence), or None when the document holds no such field."""
    if isinstance(node, yaml.SequenceNode):
        if isinstance(segment, int) and 0 <= segment < len(node.value):
            item = node.value[segment]
            return item, item.start_mark
        return None
    if isinstance(node, yaml.MappingNode):
        wanted = str(segment)
        found = None
        for key, value in node.value:  # the last of duplicate keys wins, as when loading
            if isinstance(key, yaml.ScalarNode) and key.value == wanted:
                found = value, key.start_mark
        return found
    return None


def locate(node: yaml.Node, path: str, file: str) -> Location:
    """The location of `path` in the document `node`, or of the deepest part of it there."""
    return locate_segments(node, parse_path(path), file)


def locate_segments(node: yaml.Node, segments: list[str | int], file: str) -> Location:
    """The location of the field `segments` lead to, or of the deepest of them the document
    holds (a field a patch adds is placed at the object that gets it)."""
    mark = node.start_mark
    for segment in segments:
        step = _child(node, segment)
        if step is None:
            break
        node, mark = step
    return mark_location(mark, file)


def pointer_segments(pointer: str) -> list[str | int]:
    """The segments of a JSON patch path (RFC 6901): `/spec/containers/0/env` -> spec,
    containers, 0, env; digits as list indexes (a mapping key of digits still matches)."""
    segments: list[str | int] = []
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        segments.append(int(token) if token.isdigit() else token)
    return segments
