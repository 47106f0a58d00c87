"""DRA objects found in the audited files, as facts for the other documents of the same run.

A manifest often holds a pod template's ResourceClaimTemplate (and sometimes the DeviceClass)
beside the Deployment that names it. After `kubectl apply -f` of the whole file the apiserver
has them all, and the webhook's watch sees them soon after: an audit of the file judges the
workload as the webhook will then, with those objects laid over the snapshot's (or standing
alone, without a snapshot). A namespaced object with no namespace is placed in the audit's
`--namespace`, as `kubectl apply -n` would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.facts.dra import ClaimSpec, DeviceClass, DraFacts, devices_of, reduce
from webhook.quantity import Amount

__all__ = ["FileDra", "from_documents"]

# kind -> the plural `dra.reduce` knows it by (resource.k8s.io, any version)
_KINDS = {
    "DeviceClass": "deviceclasses",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "ResourceClaim": "resourceclaims",
}


class FileDra:
    """The DRA objects of an audit's files; `over` lays them over one namespace's facts."""

    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.templates: dict[str, dict[str, ClaimSpec]] = {}  # namespace -> name -> spec
        self.claims: dict[str, dict[str, ClaimSpec]] = {}

    def __bool__(self) -> bool:
        return bool(self.classes or self.templates or self.claims)

    def add(self, obj: Mapping[str, Any], namespace: str) -> bool:
        """Keep `obj` when it is a DRA object; whether it was one."""
        api = obj.get("apiVersion")
        plural = _KINDS.get(str(obj.get("kind", "")))
        if plural is None or not isinstance(api, str) or not api.startswith("resource.k8s.io/"):
            return False
        where, name, value = reduce(plural, obj)
        if not name:
            return False
        if isinstance(value, DeviceClass):
            self.classes[name] = value
        else:
            kept = self.templates if plural == "resourceclaimtemplates" else self.claims
            kept.setdefault(where or namespace, {})[name] = value  # type: ignore[assignment]
        return True

    def over(self, namespace: str, base: DraFacts | None) -> DraFacts | None:
        """`base` (the snapshot's, or None) with the files' objects for `namespace` laid over
        it: a file's object replaces the cluster's of the same name, as an apply would."""
        templates = self.templates.get(namespace, {})
        claims = self.claims.get(namespace, {})
        if not (self.classes or templates or claims):
            return base
        known = base.device_classes if base is not None else None
        classes = {**(known or {}), **self.classes} if self.classes or known is not None else None
        used: dict[str, Amount] = dict(base.claim_devices) if base is not None else {}
        before = (base.claims if base is not None else None) or {}
        for name, spec in claims.items():
            for key, n in devices_of(spec, all_as=1).items():
                used[key] = used.get(key, 0) + n
            for key, n in devices_of(before.get(name, ()), all_as=1).items():
                used[key] = used.get(key, 0) - n  # the file's claim replaces the cluster's
        return DraFacts(
            classes,
            _laid(base.templates if base is not None else None, templates),
            _laid(base.claims if base is not None else None, claims),
            used,
            base.node_devices if base is not None else None,
            # without the cluster's own classes, a class not in the files is judged by name
            classes_partial=known is None or (base is not None and base.classes_partial),
        )


def _laid(
    base: Mapping[str, ClaimSpec] | None, files: Mapping[str, ClaimSpec]
) -> Mapping[str, ClaimSpec] | None:
    if not files:
        return base
    return {**(base or {}), **files}


def from_documents(objects: Iterable[Mapping[str, Any]], namespace: str) -> FileDra:
    """The DRA objects among `objects`, those without a namespace placed in `namespace`."""
    found = FileDra()
    for obj in objects:
        found.add(obj, namespace)
    return found
