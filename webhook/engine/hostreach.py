"""What a host path reaches: the built-in table (`ruleset.hostpaths`) and the rule set's own
`host-gpu-devices.paths`, applied to a path as the kubelet would mount it.

Pure and small: a review classifies each hostPath volume and each path a device-injection
annotation names, a handful at most.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable, Iterable
from typing import NamedTuple

from webhook.ruleset.hostpaths import HOST_PATHS, KINDS, VENDOR_PATHS, HostPathRow

__all__ = [
    "LISTED",
    "Reach",
    "classify",
    "covers_device_nodes",
    "host_path_routes",
    "normalise",
    "route_prefixes",
    "rows_for",
]

LISTED = "listed"  # a path of the rule set's host-gpu-devices.paths
_PID = "<pid>"


class Reach(NamedTuple):
    """What a host path reaches: a kind of `ruleset.hostpaths.KINDS` (or LISTED), and the
    words a denial says of it."""

    kind: str
    why: str


# A compiled row: its segments, whether it covers the subtree, the kind (None: nothing).
_Row = tuple[tuple[str, ...], bool, str | None]


def _compile(rows: Iterable[HostPathRow]) -> tuple[_Row, ...]:
    out = []
    for row in rows:
        parts = tuple(p for p in row.pattern.split("/") if p)
        subtree = bool(parts) and parts[-1] == "**"
        out.append((parts[:-1] if subtree else parts, subtree, row.reach))
    return tuple(out)


_by_vendors: dict[tuple[bool, ...], tuple[_Row, ...]] = {}


def rows_for(is_gpu: Callable[[str], bool]) -> tuple[_Row, ...]:
    """The built-in rows, with the device nodes of each accelerator the rule set counts as a
    GPU (`ruleset.hostpaths.VENDOR_PATHS`); compiled once per combination."""
    key = tuple(any(is_gpu(name) for name in names) for names, _ in VENDOR_PATHS)
    rows = _by_vendors.get(key)
    if rows is None:
        extra = [r for on, (_, vendor) in zip(key, VENDOR_PATHS, strict=True) if on for r in vendor]
        rows = _by_vendors[key] = _compile([*HOST_PATHS, *extra])
    return rows


def normalise(path: str) -> str:
    """The path the kubelet mounts: `//`, `/./` and `..` resolved, trailing slash dropped."""
    if not path:
        return path
    # Nearly every mount path is already in this form: only a relative one, or one with an
    # empty, `.` or `..` segment, can change (`/root/.cache` cannot).
    if (
        path[0] == "/"
        and path[-1] != "/"
        and "//" not in path
        and "/./" not in path
        and "/../" not in path
        and not path.endswith(("/.", "/.."))
    ):
        return path
    out = posixpath.normpath(path)
    return "/" + out.lstrip("/") if out.startswith("//") else out


def _is_pid(segment: str) -> bool:
    return segment.isdigit() or segment in ("self", "thread-self")


def _matches(parts: tuple[str, ...], row: _Row) -> bool:
    pattern, subtree, _ = row
    if len(parts) < len(pattern) or (not subtree and len(parts) != len(pattern)):
        return False
    for seg, pat in zip(parts, pattern, strict=False):
        if pat == _PID:
            if seg != _PID:
                return False
        elif seg != pat and not fnmatch.fnmatchcase(seg, pat):
            return False
    return True


def _builtin(parts: tuple[str, ...], rows: tuple[_Row, ...], depth: int = 0) -> Reach | None:
    if len(parts) >= 2 and parts[0] == "proc" and _is_pid(parts[1]):
        pid, rest = parts[1], parts[2:]
        while len(rest) >= 2 and rest[0] == "task" and _is_pid(rest[1]):
            rest = rest[2:]  # a thread's directory is its process's
        if len(rest) >= 2 and rest[0] in ("root", "cwd") and depth < 8:
            # Below a process's root: the host's own path, when the process is a host one.
            inner = _builtin(rest[1:], rows, depth + 1)
            if inner is None:
                return None
            return Reach(inner.kind, f"{inner.why}, through /proc/{pid}/{rest[0]}")
        parts = ("proc", _PID, *rest)
    for row in rows:
        if _matches(parts, row):
            kind = row[2]
            return None if kind is None else Reach(kind, KINDS[kind])
    return None


def covers_device_nodes(path: str, patterns: Iterable[str]) -> bool:
    """Whether mounting `path` exposes what a pattern of the rule set names: a path it
    matches, or a directory above one."""
    if not path.startswith("/"):
        return False
    patterns = list(patterns)
    if any(fnmatch.fnmatchcase(path, p) for p in patterns):
        return True
    above = "/" if path == "/" else path + "/"
    return any(p.startswith(above) for p in patterns)


def classify(path: str, rows: tuple[_Row, ...], listed: Iterable[str] = ()) -> Reach | None:
    """What mounting host path `path` (normalised) reaches, or None: the built-in rows first,
    then the rule set's own paths."""
    if not path.startswith("/"):
        return None
    found = _builtin(tuple(p for p in path.split("/") if p), rows)
    if found is not None:
        return found
    if covers_device_nodes(path, listed):
        return Reach(LISTED, "is listed as GPU access in the rule set (host-gpu-devices.paths)")
    return None


def route_prefixes(rows: Iterable[HostPathRow]) -> tuple[list[str], list[str]]:
    """(prefixes, exact paths) that together cover every path a row reaches something from,
    for the routing CEL: a path starting with a prefix, or equal to an exact path (with or
    without a trailing slash), may reach GPUs. `/proc/<pid>/root/<path>` is covered by the
    `/proc/` prefix of the process rows."""
    prefixes: set[str] = set()
    exact: set[str] = set()
    for row in rows:
        if row.reach is None:
            continue
        parts = [p for p in row.pattern.split("/") if p]
        subtree = bool(parts) and parts[-1] == "**"
        fixed = parts[:-1] if subtree else parts
        literal = ""
        wild = False
        for part in fixed:
            cut = min((part.find(ch) for ch in "*?[<" if ch in part), default=-1)
            if cut >= 0:
                literal += "/" + part[:cut]
                wild = True
                break
            literal += "/" + part
        if wild or subtree:
            prefixes.add(literal or "/")
        if not wild:
            exact.update({literal or "/", (literal or "") + "/"})
    # A prefix inside another, or an exact path a prefix starts, adds nothing.
    kept = sorted(p for p in prefixes if not any(o != p and p.startswith(o) for o in prefixes))
    return kept, sorted(e for e in exact if not e.startswith(tuple(kept)))


def _listed_prefixes(patterns: Iterable[str]) -> tuple[list[str], list[str]]:
    """(prefixes a listed pattern's paths start with, directories above them)."""
    fixed = []
    for p in patterns:
        cut = min((p.index(ch) for ch in "*?[" if ch in p), default=len(p))
        fixed.append(p[:cut])
    prefixes = sorted({f for f in fixed if not any(f != g and f.startswith(g) for g in fixed)})
    above: set[str] = set()
    for f in fixed:
        # '/dev/nvidia' lies in /dev; '/dev/char/' names the directory /dev/char itself.
        parts = f.rstrip("/").split("/")[1:] if f.endswith("/") else f.split("/")[1:-1]
        path = ""
        above.add("/")
        for part in parts:
            path += "/" + part
            above.update({path, path + "/"})
    return prefixes, sorted(above)


def host_path_routes(
    rows: Iterable[HostPathRow], listed: Iterable[str]
) -> tuple[list[str], list[str]]:
    """(prefixes, exact paths) of every host path that may reach GPUs, for the routing CEL:
    the built-in rows' (`route_prefixes`) and the rule set's own patterns', with the
    directories above them."""
    prefixes, exact = route_prefixes(rows)
    more, above = _listed_prefixes(listed)
    merged = sorted({*prefixes, *more})
    kept = [p for p in merged if not any(o != p and p.startswith(o) for o in merged)]
    return kept, sorted(e for e in {*exact, *above} if not e.startswith(tuple(kept)))
