"""Device-injection annotations: pod annotations a node plugin turns into devices and mounts.

NRI plugins read a pod's annotations when the runtime creates each container and add what they
list, unprivileged and without an allocation, so such an annotation is host device access:

- devices: GKE's NRI device injector (`devices.gke.io`, on GPUDirect-TCPX/TCPXO node pools)
  adds each listed host `path` as a device node; the containerd NRI sample device injector
  (`devices.noderesource.dev`, formerly `devices.nri.io`) creates the node its `type`, `major`
  and `minor` name. Judged as a hostPath of the path, and of `/dev/char/<major>:<minor>`.
- mounts: the same sample plugin (`mounts.noderesource.dev`, `mounts.nri.io`) bind-mounts each
  `source` from the host: judged as a hostPath of the source (a `sysfs` mount as `/sys`,
  `devtmpfs` as `/dev`).
- CDI devices: the sample plugin (`cdi-devices.noderesource.dev`, `cdi-devices.nri.io`) and the
  CDI NRI plugin (`cdi.nri.io`) inject CDI devices, whose nodes only the node's CDI specs say:
  each counts as device nodes.

Each family is read under `<prefix>/container.<name>` (that container), `<prefix>/pod` and
`<prefix>` (every container). The plugins read the value as YAML; the engine reads no YAML, so
the value is read only in the forms the plugins document (a block list of `key: value` entries,
plain or quoted without escapes, or JSON); anything else is refused as unreadable rather than
guessed at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CDI",
    "DEVICES",
    "MOUNTS",
    "PREFIXES",
    "Injected",
    "Unreadable",
    "injections",
    "read_value",
]

DEVICES = "devices"
MOUNTS = "mounts"
CDI = "cdi"

# Annotation key prefixes, by what they inject.
_FAMILIES: tuple[tuple[str, str], ...] = (
    ("devices.gke.io", DEVICES),
    ("devices.noderesource.dev", DEVICES),
    ("devices.nri.io", DEVICES),
    ("mounts.noderesource.dev", MOUNTS),
    ("mounts.nri.io", MOUNTS),
    ("cdi-devices.noderesource.dev", CDI),
    ("cdi-devices.nri.io", CDI),
    ("cdi.nri.io", CDI),
)
PREFIXES: tuple[str, ...] = tuple(p for p, _ in _FAMILIES)


@dataclass(frozen=True, slots=True)
class Injected:
    """One thing an annotation injects: a host path to judge (`host_path`), a CDI device
    (`cdi`), or why the value cannot be read (`unreadable`)."""

    key: str
    container: str  # "" for every container of the pod
    what: str  # for a message: "device '/dev/nvidia0'", "mount of host path '/sys'"
    host_path: str = ""
    cdi: str = ""
    unreadable: str = ""


def _family(key: str) -> tuple[str, str] | None:
    """(what it injects, container name or "") of an annotation key the plugins read."""
    for prefix, kind in _FAMILIES:
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix) :]
        if rest in ("", "/pod"):
            return kind, ""
        if rest.startswith("/container.") and len(rest) > len("/container."):
            return kind, rest[len("/container.") :]
    return None


# ---- a strict reader of the documented value forms --------------------------------------

_ITEM = re.compile(r"^(?P<indent> *)- *(?P<rest>.*)$")
_PAIR = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_-]*) *:(?: +(?P<value>.*))?$")
_PLAIN_START = re.compile(r"^[^-?:,\[\]{}#&*!|>'\"%@`\s]|^[-?:][^\s]")


class Unreadable(ValueError):
    """A value in a form the reader does not take."""


def _scalar(text: str) -> str:
    """A scalar as YAML reads it, in the forms without escapes: plain, 'single', "double"."""
    text = text.strip()
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise Unreadable("an unterminated quoted value")
        inner = text[1:-1]
        if re.search(r"(?<!')'(?!')", inner.replace("''", "")):
            raise Unreadable("a quote inside a quoted value")
        return inner.replace("''", "'")
    if text.startswith('"'):
        inner = text[1:-1]
        if not text.endswith('"') or len(text) < 2 or '"' in inner or "\\" in inner:
            raise Unreadable("a double-quoted value with escapes")
        return inner
    if " #" in text:
        text = text.split(" #", 1)[0].rstrip()
    if text and not _PLAIN_START.match(text):
        raise Unreadable(f"a value starting with {text[0]!r}")
    if ": " in text or text.endswith(":"):
        raise Unreadable("a value holding ': '")
    return text


def _block(value: str) -> list[Any]:
    """A block sequence of scalars or of one-level mappings (a key whose value is a nested
    block list, such as a mount's `options`, is kept as a list of scalars)."""
    items: list[Any] = []
    dash: int | None = None
    nested: list[str] | None = None
    nested_indent = -1
    for raw in value.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line in ("---", "...") or line.startswith(("--- ", "... ", "%")):
            raise Unreadable("a document marker or directive")
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise Unreadable("a tab in the indentation")
        item = _ITEM.match(line)
        indent = len(line) - len(line.lstrip(" "))
        if nested is not None and item and indent >= nested_indent and indent > (dash or 0):
            nested.append(_scalar(item.group("rest")))
            continue
        nested = None
        if item and (dash is None or indent == dash):
            dash = indent
            rest = item.group("rest")
            pair = _PAIR.match(rest)
            if pair is None:
                items.append(_scalar(rest))
                continue
            entry: dict[str, Any] = {}
            items.append(entry)
            nested, nested_indent = _put(entry, pair, indent + 1)
            continue
        pair = _PAIR.match(line.strip())
        if dash is None or indent <= dash or pair is None or not items:
            raise Unreadable(f"the line {line.strip()[:40]!r}")
        entry = items[-1]
        if not isinstance(entry, dict):
            raise Unreadable(f"the line {line.strip()[:40]!r}")
        nested, nested_indent = _put(entry, pair, indent)
    return items


def _put(entry: dict[str, Any], pair: re.Match[str], indent: int) -> tuple[list[str] | None, int]:
    key, value = pair.group("key"), pair.group("value")
    if key in entry:
        raise Unreadable(f"{key!r} given twice")
    if value is None or not value.strip() or value.strip().startswith("#"):
        entry[key] = []  # a nested block list follows (or nothing)
        return entry[key], indent
    text = value.strip()
    if text.startswith("["):  # a flow list of plain words: `options: [rbind, ro]`
        if not text.endswith("]") or any(c in text[1:-1] for c in "[]{}'\"\\"):
            raise Unreadable("a flow list")
        entry[key] = [_scalar(w) for w in text[1:-1].split(",") if w.strip()]
        return None, -1
    entry[key] = _scalar(text)
    return None, -1


def read_value(value: str) -> list[Any]:
    """The list an annotation value holds, read as the plugins' YAML reads the documented
    forms; `Unreadable` for anything else."""
    text = value.strip()
    if not text:
        return []
    if text[0] in "[{":
        try:
            found = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise Unreadable("JSON that does not parse") from exc
        if not isinstance(found, list):
            raise Unreadable("JSON that is not a list")
        return found
    return _block(value)


# ---- what each annotation injects -------------------------------------------------------


def _has_backstep(path: str) -> bool:
    return ".." in path.split("/")


def _items(key: str, container: str, kind: str, value: str) -> Iterator[Injected]:
    try:
        items = read_value(value)
    except Unreadable as exc:
        yield Injected(key, container, "", unreadable=str(exc))
        return
    for item in items:
        if kind == CDI:
            if isinstance(item, str) and item:
                yield Injected(key, container, f"CDI device {item!r}", cdi=item)
            continue
        if not isinstance(item, dict):
            continue  # the plugin refuses it: nothing is injected
        if kind == DEVICES:
            yield from _device(key, container, item)
        else:
            yield from _mount(key, container, item)


def _device(key: str, container: str, item: Mapping[str, Any]) -> Iterator[Injected]:
    path = item.get("path")
    if isinstance(path, str) and path:
        if _has_backstep(path):
            yield Injected(key, container, "", unreadable=f"the path {path!r} holds '..'")
        else:
            yield Injected(key, container, f"device {path!r}", host_path=path)
    major, minor = item.get("major"), item.get("minor")
    if major not in (None, "", []) and minor not in (None, "", []):
        node = f"/dev/char/{major}:{minor}"
        yield Injected(key, container, f"device {major}:{minor}", host_path=node)


def _mount(key: str, container: str, item: Mapping[str, Any]) -> Iterator[Injected]:
    source, kind = item.get("source"), item.get("type")
    if kind in ("sysfs", "devtmpfs"):
        host = "/sys" if kind == "sysfs" else "/dev"
        yield Injected(key, container, f"a {kind} mount", host_path=host)
    if isinstance(source, str) and source.startswith("/"):
        if _has_backstep(source):
            yield Injected(key, container, "", unreadable=f"the source {source!r} holds '..'")
        else:
            yield Injected(key, container, f"mount of host path {source!r}", host_path=source)


def injections(annotations: Mapping[str, str]) -> list[Injected]:
    """Everything the pod's device-injection annotations inject ([] for nearly every pod:
    one prefix test per annotation)."""
    out: list[Injected] = []
    for key, value in annotations.items():
        if not key.startswith(PREFIXES):
            continue
        found = _family(key)
        if found is None or not isinstance(value, str):
            continue
        kind, container = found
        out.extend(_items(key, container, kind, value))
    return out
