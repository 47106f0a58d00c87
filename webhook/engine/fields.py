"""Reading the fields of an object a review carries: typed, bounded, and naming the field.

The review envelope is strict, the object inside is tolerant, but a field of the wrong type
becomes an `UnreadableObject` that names it instead of a crash deep inside a rule. Shared by
the pod views and the DRA claim references they read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from webhook.ruleset.workloads import LIST_ITEMS, MAP_VALUES

__all__ = [
    "UnreadableObject",
    "claim_refs",
    "dotted",
    "list_of_mappings",
    "lists_ok",
    "mapping",
    "maps_ok",
    "pod_claims",
    "pointer",
    "text_field",
    "walk",
]


class UnreadableObject(ValueError):
    """The object has a field of a type no Kubernetes object could have there."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def pointer(*segments: str | int) -> str:
    """A JSON pointer (RFC 6901) with `~` and `/` escaped in each segment."""
    return "".join("/" + str(s).replace("~", "~0").replace("/", "~1") for s in segments)


def dotted(prefix: str, *segments: str | int) -> str:
    """A kubectl-style field path for messages: spec.containers[0].resources."""
    out = prefix
    for seg in segments:
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif "." in seg or "/" in seg:
            out += f'["{seg}"]'
        else:
            out += f".{seg}" if out else seg
    return out


def mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UnreadableObject(where, f"expected an object, found {type(value).__name__}")
    return value


def list_of_mappings(value: Any, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise UnreadableObject(where, f"expected a list, found {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise UnreadableObject(
                f"{where}[{i}]", f"expected an object, found {type(item).__name__}"
            )
    return value


def text_field(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UnreadableObject(f"{where}.{key}", f"expected a string, found {type(value).__name__}")
    return value


def claim_refs(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """(claim, request) of each `resources.claims` entry: the pod's DRA claims a container
    uses, all of a claim's requests when `request` is empty."""
    refs = []
    for i, ref in enumerate(list_of_mappings(value, where)):
        name, request = (text_field(ref, key, f"{where}[{i}]") for key in ("name", "request"))
        if name:
            refs.append((name, request))
    return tuple(refs)


def pod_claims(value: Any, where: str) -> tuple[tuple[str, str, str], ...]:
    """(name, resourceClaimTemplateName, resourceClaimName) of each `spec.resourceClaims`."""
    claims = []
    for i, claim in enumerate(list_of_mappings(value, where)):
        name, template, existing = (
            text_field(claim, key, f"{where}[{i}]")
            for key in ("name", "resourceClaimTemplateName", "resourceClaimName")
        )
        if name:
            claims.append((name, template, existing))
    return tuple(claims)


def walk(
    node: Any, segments: tuple[str, ...], done: tuple[str | int, ...]
) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Yield (path, value) for each place `segments` reaches; absent branches yield nothing."""
    if not segments:
        yield done, node
        return
    head, rest = segments[0], segments[1:]
    if head in (LIST_ITEMS, MAP_VALUES):  # either walks list items and map values alike
        if isinstance(node, list):
            for i, item in enumerate(node):
                yield from walk(item, rest, (*done, i))
        elif isinstance(node, dict):  # replica-spec maps: {Master: {...}, Worker: {...}}
            for key, item in node.items():
                yield from walk(item, rest, (*done, key))
        return
    if not isinstance(node, dict):
        if node is not None:
            raise UnreadableObject(
                dotted("", *done) or "object", f"expected an object, found {type(node).__name__}"
            )
        return
    if head in node and node[head] is not None:
        yield from walk(node[head], rest, (*done, head))


def lists_ok(c: dict[str, Any], fields: tuple[str, ...]) -> bool:
    """Whether each field is absent or a list of objects: the common case, checked without
    building the field paths a message would need."""
    for f in fields:
        value = c.get(f)
        if value is not None and (
            type(value) is not list or not all(type(i) is dict for i in value)
        ):
            return False
    return True


def maps_ok(c: dict[str, Any], fields: tuple[str, ...]) -> bool:
    for f in fields:
        value = c.get(f)
        if value is not None and type(value) is not dict:
            return False
    return True
