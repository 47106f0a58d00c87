"""Reading the YAML files users hand us: nesting depth, what aliases expand to, syntax errors
and unreadable files, decided and said by the project rather than by the libraries underneath.

PyYAML's own behaviour at depth changes between releases: up to 6.0.3 libyaml composes any depth
and its recursive C composer crashes the process (a segfault, on an 8 MiB stack) past about
20,000 nested collections; from 6.0.4 its scanner refuses more than 1,000 with an error of its
own, before the first event of the document is read. Readers ask `deeper_than` before composing,
with a limit below both, so deep nesting always gets the project's error naming its line.

Aliases share a value instead of copying it, so loading an "alias bomb" costs nothing; the
cost comes later, when something walks or writes the document out (a schema check, a JSON
copy, a diff). Every reader asks `expansion` right after loading, and refuses a document that
would expand past MAX_NODES values or MAX_BYTES of text (a few hundred bytes can stand for
gigabytes either way). Anchors within the bounds stay legal: some manifests share an env list.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

_CParser: Any = getattr(yaml, "CSafeLoader", None)
# The safe loader to read with: libyaml's when PyYAML was built with it (several times faster,
# and its composer does not recurse in Python), the pure-Python one otherwise.
LOADER: Any = _CParser or yaml.SafeLoader
# How deep a Kubernetes object, or a file of them, may nest: below where any PyYAML release
# crashes or refuses on its own, below where the recursive code after loading (YAML and JSON
# output, the patch diff) nears Python's recursion limit, and far beyond any real object (a
# CRD's schema nests ~40).
MAX_DEPTH = 200
# What one document may expand to through aliases: far above any real file (a big Deployment
# is ~2k values and ~50 KiB, a 5,000-node snapshot ~1M values), far below an alias bomb.
MAX_NODES = 2_000_000
MAX_BYTES = 64 * 2**20
# A scalar PyYAML cannot construct: Python refuses integers of over 4,300 digits (ValueError).
UNCONSTRUCTABLE = "holds a value that cannot be read (an integer of thousands of digits?)"

# What may come before the first block collection that opens on a line: indentation and the
# compact indicators `- `, `? ` and `: ` (a byte-order mark is skipped at a line's start). After
# a key, an anchor or a tag no block collection can open on the same line.
_PREFIX_CHARS = " \t?:\\-\ufeff"
_LINE_START = "(?:^|[\r\x85\u2028\u2029])"


def could_pass(text: str, limit: int) -> bool:
    """False when `text` certainly nests at most `limit` collections deep; cheap, in C.

    Every flow collection needs its own `[` or `{`, but for the single-pair mapping a flow
    sequence may hold (`[a: b]`), so each `[` counts twice. A block collection opens at a greater
    column than the block collection around it, except a sequence at its parent key's column,
    and no later on its line than the prefix of indentation and indicators: so block nesting is
    at most twice (the longest such prefix + 1).
    """
    # A `[` can open two levels: the sequence, and a single-pair mapping in it (`[a: b]`).
    flow = 2 * text.count("[") + text.count("{")
    if flow >= limit:
        return True
    needed = (limit - flow) // 2  # the shortest prefix that could reach limit + 1
    pattern = f"{_LINE_START}[{_PREFIX_CHARS}]{{{needed},}}"
    return re.search(pattern, text, re.MULTILINE) is not None


def deeper_than(text: str, limit: int) -> int | None:
    """The line (1-based) where nesting first passes `limit` collections, or None
    (`deeper_than_at` for the line and column)."""
    where = deeper_than_at(text, limit)
    return where[0] if where is not None else None


def deeper_than_at(text: str, limit: int) -> tuple[int, int] | None:
    """(line, column), 1-based, where nesting first passes `limit` collections, or None.

    None too for a text that is not valid YAML before that point: the reader then reports
    the syntax error with its own line. Parsing events never recurses, so any depth is safe to
    count; libyaml is tried first for speed, and where it refuses (its own nesting cap, or a
    real syntax error) the pure-Python parser, which has no cap, gives the answer.
    """
    if not could_pass(text, limit):
        return None
    parsers = (_CParser, yaml.SafeLoader) if _CParser is not None else (yaml.SafeLoader,)
    for parser in parsers:
        try:
            return _first_past(yaml.parse(text, Loader=parser), limit)
        except yaml.YAMLError:
            continue
    return None


def _first_past(events: Iterable[yaml.Event], limit: int) -> tuple[int, int] | None:
    depth = 0
    for event in events:
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > limit:
                mark = event.start_mark
                return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    return None


def syntax_error(exc: yaml.YAMLError) -> tuple[int | None, str]:
    """(line, message) for a YAML syntax error: where it is, in our words, with the parser's
    one-line reason after them (never its multi-line context, which quotes "<unicode string>")."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None)
    line = mark.line + 1 if mark is not None else None
    where = f" at line {line}, column {mark.column + 1}" if mark is not None else ""
    reason = f" ({problem})" if isinstance(problem, str) and problem else ""
    return line, f"not valid YAML{where}{reason}"


_OS_PROBLEMS = {
    errno.ENOENT: "no such file",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EISDIR: "a folder, not a file",
    errno.ENOTDIR: "a path through something that is not a folder",
    errno.ELOOP: "a loop of symbolic links",
}


def unreadable(exc: OSError | UnicodeDecodeError) -> str:
    """Why a file could not be read, in a few words."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start} cannot be decoded)"
    return "cannot read it: " + _OS_PROBLEMS.get(exc.errno or 0, exc.strerror or "I/O error")


def expansion(doc: Any, *, max_nodes: int = MAX_NODES, max_bytes: int = MAX_BYTES) -> str | None:
    """Why `doc` is too large once its aliases are expanded, or None.

    Counts values (collections and scalars, as written out) and bytes (strings and keys by
    their length, any other scalar as 8). A value shared by aliases is walked once and counted
    once per reference, so the count costs what the document as loaded holds, never what it
    expands to; it stops at the first bound passed.
    """
    sizes: dict[int, tuple[int, int]] = {}  # id of a collection -> (values, bytes)
    open_: set[int] = set()  # collections being counted: meeting one again is a loop
    # Post-order without recursion: depth is bounded by the readers, but not everywhere.
    stack: list[tuple[Any, bool]] = [(doc, False)]
    while stack:
        value, children_done = stack.pop()
        key = id(value)
        if children_done:
            nodes, size = 1, 0
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for name, child in items:
                if isinstance(value, dict):
                    size += len(name) if isinstance(name, str) else 8
                if isinstance(child, (dict, list)):
                    child_nodes, child_size = sizes[id(child)]
                else:
                    child_nodes, child_size = 1, len(child) if isinstance(child, str) else 8
                nodes, size = nodes + child_nodes, size + child_size
                if nodes > max_nodes or size > max_bytes:
                    return _too_large(nodes > max_nodes, max_nodes, max_bytes)
            sizes[key] = (nodes, size)
            open_.discard(key)
        elif key in open_:
            return "contains itself through a YAML alias"
        elif key not in sizes:
            open_.add(key)
            stack.append((value, True))
            children = value.values() if isinstance(value, dict) else value
            stack.extend((c, False) for c in children if isinstance(c, (dict, list)))
    if isinstance(doc, (dict, list)):
        return None
    size = len(doc) if isinstance(doc, str) else 8
    return _too_large(False, max_nodes, max_bytes) if size > max_bytes else None


def _too_large(nodes: bool, max_nodes: int, max_bytes: int) -> str:
    if nodes:
        return f"expands to over {max_nodes} values through YAML aliases (an alias bomb?)"
    return f"expands to over {max_bytes / 2**20:g} MiB through YAML aliases (an alias bomb?)"


class YamlFileError(ValueError):
    """A YAML file that cannot be read as one document: the message names the file (and the
    line, where there is one) in the project's words."""


def read_document(path: Path, *, max_nodes: int = MAX_NODES, max_bytes: int = MAX_BYTES) -> Any:
    """The one YAML document in `path`, read safely (depth first, then what its aliases
    expand to), or a `YamlFileError`."""
    try:
        text = path.read_text()
        deep = deeper_than(text, MAX_DEPTH)
        if deep is not None:
            raise YamlFileError(f"{path}:{deep}: nested deeper than {MAX_DEPTH} levels")
        doc = yaml.load(text, Loader=LOADER)
        # Aliases need anchors: a text without "&" cannot expand, so nothing is counted.
        why = expansion(doc, max_nodes=max_nodes, max_bytes=max_bytes) if "&" in text else None
        if why is not None:
            raise YamlFileError(f"{path}: {why}. Fix: write the shared part out where it is needed")
        return doc
    except (OSError, UnicodeDecodeError) as exc:
        raise YamlFileError(f"{path}: {unreadable(exc)}") from None
    except yaml.YAMLError as exc:
        line, message = syntax_error(exc)
        raise YamlFileError(f"{path}:{line}: {message}" if line else f"{path}: {message}") from None
    except YamlFileError:
        raise
    except ValueError:  # a scalar PyYAML cannot construct (Python's integer digit limit)
        raise YamlFileError(f"{path}: {UNCONSTRUCTABLE}") from None
