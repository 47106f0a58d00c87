"""Reading manifests for the audit: files, folders, stdin; multi-document YAML/JSON; `List`s.

Garbage must not stop a run: a document that does not parse is reported with its line and the
next file goes on. YAML alias bombs are refused by counting what a document expands to, in
values and in bytes (`yamlinput.expansion`), before anything walks it.

Each document keeps the node tree the loader composed it from (with every node's line and
column) so a finding can point at the line of its field; nothing more is parsed for that.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook.audit.locations import Location, locate, mark_location
from webhook.yamlinput import LOADER, MAX_DEPTH, UNCONSTRUCTABLE, deeper_than, expansion

__all__ = ["Document", "InputError", "read_sources"]
_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Document:
    """One object to audit. `file` and `node` are there when it was read from text (a file or
    stdin, `-`); an object listed from a cluster has neither, and so no location."""

    source: str  # "path#index" (index of the document in its file, then of the List item)
    obj: dict[str, Any]
    file: str | None = None
    node: yaml.Node | None = None

    def locate(self, path: str) -> Location | None:
        """Where the field `path` (kubectl style, relative to the object) is in the file."""
        if self.node is None or self.file is None:
            return None
        return locate(self.node, path, self.file)


@dataclass(frozen=True, slots=True)
class InputError:
    """Input that could not be audited, with where it went wrong when that is known."""

    source: str
    message: str
    location: Location | None = None


def _compose(loader: Any) -> Iterator[yaml.Node | None]:
    """The node tree of each document of the stream (None for an empty one).

    What `yaml.load_all` does, minus the construction: the caller builds the object from the
    node and keeps the node for the locations of findings.
    """
    while loader.check_node():
        yield loader.get_node()


def _documents(text: str, label: str) -> Iterator[Document | InputError]:
    loader_class = LOADER
    has_anchors = "&" in text
    index = 0
    deep = deeper_than(text, MAX_DEPTH)
    if deep is not None:
        yield InputError(
            f"{label}#0",
            f"nested deeper than {MAX_DEPTH} levels at line {deep}",
            Location(label, deep, 1) if deep else None,
        )
        return
    loader = loader_class(text)
    nodes = _compose(loader)
    try:
        while True:
            try:
                node = next(nodes)
                doc = loader.construct_document(node) if node is not None else None
            except StopIteration:
                return
            except yaml.YAMLError as exc:
                location = _error_location(exc, text, label)
                where = f" line {location.line}" if location is not None else ""
                problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                yield InputError(
                    f"{label}#{index}", f"not valid YAML at{where}: {problem}", location
                )
                return  # the parser cannot resync after an error in this stream
            except RecursionError:
                yield InputError(f"{label}#{index}", "nesting too deep to read")
                return
            except ValueError:  # a scalar PyYAML cannot construct (Python's integer digit limit)
                yield InputError(
                    f"{label}#{index}",
                    UNCONSTRUCTABLE,
                )
                return
            source = f"{label}#{index}"
            index += 1
            if doc is None or node is None:
                continue
            start = mark_location(node.start_mark, label)
            # Aliases need anchors: a text without "&" cannot expand, so skip the count.
            why = expansion(doc) if has_anchors else None
            if why is not None:
                yield InputError(source, why, start)
                continue
            if not isinstance(doc, dict):
                yield InputError(source, f"expected an object, found {type(doc).__name__}", start)
                continue
            if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
                yield from _list_items(source, doc["items"], _items_node(node), label)
                continue
            yield Document(source, doc, label, node)
    finally:
        loader.dispose()


def _error_location(exc: yaml.YAMLError, text: str, label: str) -> Location | None:
    """Where the parser gave up. At the end of a text without a final newline libyaml marks
    a line the text does not have: that is the end of the last line, for an editor."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return None
    where = mark_location(mark, label)
    last = text.count("\n") + 1  # as editors number lines: one after a final newline
    if where.line > last:
        return Location(label, last, len(text) - (text.rfind("\n") + 1) + 1)
    return where


def _items_node(node: yaml.Node) -> yaml.SequenceNode | None:
    """The node of a List's `items`, whose entries are the nodes of the listed objects."""
    found = None
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == "items":
                found = value
    return found if isinstance(found, yaml.SequenceNode) else None


def _list_items(
    source: str, items: list[Any], node: yaml.SequenceNode | None, label: str
) -> Iterator[Document | InputError]:
    nodes = node.value if node is not None and len(node.value) == len(items) else None
    for i, item in enumerate(items):
        item_node = nodes[i] if nodes is not None else None
        if isinstance(item, dict):
            yield Document(f"{source}.items[{i}]", item, label, item_node)
        else:
            where = mark_location(item_node.start_mark, label) if item_node is not None else None
            yield InputError(f"{source}.items[{i}]", "expected an object", where)


def _files(path: Path) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
    else:
        yield path


def read_sources(paths: list[str]) -> Iterator[Document | InputError]:
    """Documents from every path (`-` is stdin), one file at a time."""
    for raw in paths:
        if raw == "-":
            yield from _documents(sys.stdin.read(), "-")
            continue
        root = Path(raw)
        if not root.exists():
            yield InputError(raw, "no such file or folder")
            continue
        for path in _files(root):
            try:
                text = path.read_bytes().decode("utf-8")
            except UnicodeDecodeError:
                yield InputError(str(path), "not a text file (not UTF-8)")
                continue
            except OSError as exc:
                yield InputError(str(path), f"cannot read: {exc.strerror}")
                continue
            yield from _documents(text, str(path))
