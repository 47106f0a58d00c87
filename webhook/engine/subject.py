"""What is being admitted, built one way for every front door.

The webhook builds a subject from an AdmissionRequest, the audit from a document, the rules
tests from a case; all three go through `subject_for`, so the namespace and name an object is
judged under are worked out in exactly one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.engine.podviews import group_of

__all__ = ["Subject", "subject_for"]


# A compiled value: never edited once built ("Compiled values", docs/development.md).
@dataclass(slots=True, init=False)
class Subject:
    """The object, its kind, and the request facts rules depend on."""

    obj: Any
    group: str
    kind: str
    namespace: str
    operation: str = "CREATE"
    old_obj: Any = None
    # None when unknown (no cluster facts): selectors on namespace labels then match nothing.
    namespace_labels: Mapping[str, str] | None = None
    name: str = ""  # metadata.name, else generateName, else the request's name
    subresource: str = ""  # "ephemeralcontainers" for kubectl debug; other subresources: none
    # Who asks (the request's userInfo.username); "" when unknown (audits, rules tests): the
    # workload exemptions trust a pod only when its controller creates it.
    user: str = ""

    def __init__(
        self,
        obj: Any,
        group: str,
        kind: str,
        namespace: str,
        operation: str = "CREATE",
        old_obj: Any = None,
        namespace_labels: Mapping[str, str] | None = None,
        name: str = "",
        subresource: str = "",
        user: str = "",
    ) -> None:
        self.obj = obj
        self.group = group
        self.kind = kind
        self.namespace = namespace
        self.operation = operation
        self.old_obj = old_obj
        self.namespace_labels = namespace_labels
        self.name = name
        self.subresource = subresource
        self.user = user


def _metadata(obj: Any) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}


def subject_for(
    obj: Any,
    *,
    group: str | None = None,
    kind: str | None = None,
    namespace: str = "",
    fallback_namespace: str = "default",
    operation: str = "CREATE",
    old_obj: Any = None,
    namespace_labels: Mapping[str, str] | None = None,
    name: str = "",
    subresource: str = "",
    user: str = "",
    scoped: bool = True,
) -> Subject:
    """The engine's input for `obj`.

    `namespace` is authoritative when given (the apiserver's `request.namespace`: on CREATE the
    object may lack `metadata.namespace`); otherwise the object's own namespace, else
    `fallback_namespace` (the audit's `--namespace`). An object of a cluster-scoped kind
    (`scoped` false) belongs to no namespace, whatever its metadata says. Group and kind
    default to the object's.
    """
    meta = _metadata(obj)
    own_ns = meta.get("namespace")
    ns = ""
    if scoped:
        ns = namespace or (own_ns if isinstance(own_ns, str) and own_ns else "")
        ns = ns or fallback_namespace
    if kind is None:
        kind = str(obj.get("kind", "")) if isinstance(obj, dict) else ""
    if group is None:
        group = group_of(obj.get("apiVersion")) if isinstance(obj, dict) else ""
    return Subject(
        obj,
        group,
        kind,
        ns,
        operation,
        old_obj,
        namespace_labels,
        name or str(meta.get("name") or meta.get("generateName") or ""),
        subresource,
        user,
    )
