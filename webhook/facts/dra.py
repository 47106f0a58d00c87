"""DRA (`resource.k8s.io/v1`) objects as the rules need them: pure readers and one store.

A pod asks for DRA devices by name only: `spec.resourceClaims[]` names a ResourceClaimTemplate
(a claim made for the pod) or a ResourceClaim (one that exists already), and only those objects
say which DeviceClass each request draws from and how many devices it takes. So the facts keep,
per namespace, each template's and claim's requests reduced to (class, count), and each
DeviceClass's name, the DRA drivers its CEL selectors require and its `extendedResourceName`.
Which classes hand out GPUs is the rule set's business (`gpuDeviceClasses`), not the facts'.

Counts follow ResourceQuota's `<class>.deviceclass.resource.k8s.io/devices`: an exact count,
and for `firstAvailable` the largest alternative of each class. `allocationMode: All` takes
every matching device of a node, a number no object states: it is kept as None, and the
callers say how they count it (ResourceQuota charges 32, the most one allocation holds; a
budget counts 1, the least it can be, so an unknown never denies).

ResourceSlices (`draslices`) are kept as devices per node and driver: how many GPUs DRA
serves on each node, which no node's allocatable shows.

Everything here is pure; `DraCache` is edited by one writer at a time (the live cache's lock,
or the snapshot loader) and hands readers values that are replaced, never changed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from webhook.facts.draslices import KIND as SLICES
from webhook.facts.draslices import SliceDevices, SliceStore, slice_devices
from webhook.quantity import Amount

__all__ = [
    "IMPLICIT_PREFIX",
    "KINDS",
    "MAX_ALLOCATION",
    "QUOTA_SUFFIX",
    "ClaimRequest",
    "ClaimSpec",
    "DeviceAsk",
    "DeviceClass",
    "DraCache",
    "DraFacts",
    "claim_owner",
    "claim_spec",
    "device_class",
    "device_key",
    "devices_of",
    "drivers_in",
    "reduce",
]

log = logging.getLogger("gpu-admission.cache")

# The API kinds, by their plural (as the live cache lists them).
KINDS = ("deviceclasses", "resourceclaimtemplates", "resourceclaims", SLICES)

# A DeviceClass's implicit extended resource name: `deviceclass.resource.kubernetes.io/<class>`
# asks for devices of that class as a plain resource (Kubernetes 1.34+, DRAExtendedResource).
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
# ResourceQuota's per-class key: `<class>.deviceclass.resource.k8s.io/devices`.
QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"
# AllocationResultsMaxSize: what ResourceQuota charges for an `allocationMode: All` request.
MAX_ALLOCATION = 32


def device_key(device_class: str) -> str:
    """The ResourceQuota key (and budget and usage key) for devices of one DeviceClass."""
    return device_class + QUOTA_SUFFIX


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    drivers: tuple[str, ...] = ()  # drivers its CEL selectors require: device.driver == "x"
    extended_resource_name: str = ""  # a plain resource name its devices also satisfy


@dataclass(frozen=True, slots=True)
class DeviceAsk:
    """One way to satisfy a request: devices of one class."""

    device_class: str
    count: int | None  # None: allocationMode All (every matching device of the node)


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One entry of `spec.devices.requests`: `exactly` is one alternative, `firstAvailable`
    several, of which the scheduler picks one."""

    name: str
    alternatives: tuple[DeviceAsk, ...]
    first_available: bool = False


ClaimSpec = tuple[ClaimRequest, ...]


# A compiled value: never edited once built ("Compiled values", docs/development.md).
@dataclass(slots=True, init=False)
class DraFacts:
    """The DRA objects one namespace's pods may name. None: the source does not know that
    kind (not listed yet, not allowed, a snapshot without it); empty: known, none there
    (also: DRA not served by the cluster)."""

    device_classes: Mapping[str, DeviceClass] | None
    templates: Mapping[str, ClaimSpec] | None
    claims: Mapping[str, ClaimSpec] | None
    # Devices the namespace's ResourceClaims take, by `device_key` (`devices_of`, All as 1):
    # what a webhook budget naming such a key has in use. Empty while claims are unknown.
    claim_devices: Mapping[str, Amount]
    # Devices DRA drivers publish, node -> driver -> count (`draslices`; "" for slices of
    # several nodes); None while ResourceSlices are unknown.
    node_devices: Mapping[str, Mapping[str, int]] | None = None
    # True: `device_classes` lists some of the cluster's classes only (those of an audit's
    # files, the cluster's own unknown): a class not there is judged by its name alone.
    classes_partial: bool = False

    def __init__(
        self,
        device_classes: Mapping[str, DeviceClass] | None,
        templates: Mapping[str, ClaimSpec] | None,
        claims: Mapping[str, ClaimSpec] | None,
        claim_devices: Mapping[str, Amount],
        node_devices: Mapping[str, Mapping[str, int]] | None = None,
        classes_partial: bool = False,
    ) -> None:
        self.device_classes = device_classes
        self.templates = templates
        self.claims = claims
        self.claim_devices = claim_devices
        self.node_devices = node_devices
        self.classes_partial = classes_partial


# ---- readers ----------------------------------------------------------------------------

# `device.driver == "gpu.nvidia.com"`, either quote, either side of the comparison.
_DRIVER = re.compile(
    r"""device\.driver\s*==\s*(["'])([^"']+)\1|(["'])([^"']+)\3\s*==\s*device\.driver"""
)


def drivers_in(expression: str) -> tuple[str, ...]:
    """The DRA drivers a CEL selector compares `device.driver` with, in order, once each."""
    found: list[str] = []
    for m in _DRIVER.finditer(expression):
        name = m.group(2) or m.group(4)
        if name not in found:
            found.append(name)
    return tuple(found)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def device_class(obj: Mapping[str, Any]) -> DeviceClass:
    spec = _dict(obj.get("spec"))
    drivers: list[str] = []
    for selector in _list(spec.get("selectors")):
        for name in drivers_in(_str(_dict(_dict(selector).get("cel")).get("expression"))):
            if name not in drivers:
                drivers.append(name)
    return DeviceClass(
        name=_str(_dict(obj.get("metadata")).get("name")),
        drivers=tuple(drivers),
        extended_resource_name=_str(spec.get("extendedResourceName")),
    )


def _ask(raw: dict[str, Any]) -> DeviceAsk | None:
    """An ExactDeviceRequest or DeviceSubRequest; None without a class."""
    name = _str(raw.get("deviceClassName"))
    if not name:
        return None
    mode = raw.get("allocationMode") or "ExactCount"
    if mode != "ExactCount":
        return DeviceAsk(name, None)  # All, or a mode newer than us: count unknown
    count = raw.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        count = 1  # the apiserver defaults a missing count to 1 and refuses less
    return DeviceAsk(name, count)


# Claims made from one template are alike: share one value instead of a copy per pod.
_INTERNED: dict[ClaimSpec, ClaimSpec] = {}


def claim_spec(spec: Any) -> ClaimSpec:
    """A ResourceClaimSpec reduced to its requests' (class, count) alternatives.

    Reads `resource.k8s.io/v1` (`exactly`, `firstAvailable`) and the v1beta1 shape (the
    class right on the request), as objects in a snapshot file may be either.
    """
    requests: list[ClaimRequest] = []
    for raw in _list(_dict(_dict(spec).get("devices")).get("requests")):
        raw = _dict(raw)
        name = _str(raw.get("name"))
        subs = _list(raw.get("firstAvailable"))
        if subs:
            alternatives = [_ask(_dict(s)) for s in subs]
        else:
            alternatives = [_ask(_dict(raw.get("exactly")) or raw)]
        found = tuple(a for a in alternatives if a is not None)
        if found:
            requests.append(ClaimRequest(name, found, bool(subs)))
    out = tuple(requests)
    if len(_INTERNED) < 4096:
        return _INTERNED.setdefault(out, out)
    return _INTERNED.get(out, out)


def claim_owner(obj: Mapping[str, Any]) -> str:
    """The pod a claim was made for from a template (its controller owner), else ""."""
    for ref in _list(_dict(obj.get("metadata")).get("ownerReferences")):
        ref = _dict(ref)
        if ref.get("kind") == "Pod" and ref.get("controller") and isinstance(ref.get("name"), str):
            return str(ref["name"])
    return ""


def devices_of(spec: ClaimSpec, all_as: int) -> dict[str, int]:
    """Devices a claim takes by `device_key`, as ResourceQuota counts them: each request's
    largest alternative per class; an `All` request counts `all_as`."""
    out: dict[str, int] = {}
    for request in spec:
        largest: dict[str, int] = {}
        for alt in request.alternatives:
            n = all_as if alt.count is None else alt.count
            largest[alt.device_class] = max(largest.get(alt.device_class, 0), n)
        for name, n in largest.items():
            key = device_key(name)
            out[key] = out.get(key, 0) + n
    return out


def reduce(
    kind: str, obj: Mapping[str, Any]
) -> tuple[str, str, DeviceClass | ClaimSpec | SliceDevices]:
    """(namespace, name, value) of one object of a DRA kind, as `DraCache` keeps it."""
    meta = _dict(obj.get("metadata"))
    namespace, name = _str(meta.get("namespace")), _str(meta.get("name"))
    if kind == "deviceclasses":
        return "", name, device_class(obj)
    if kind == SLICES:
        return "", name, slice_devices(obj)
    spec = _dict(obj.get("spec"))
    if kind == "resourceclaimtemplates":
        spec = _dict(spec.get("spec"))  # the template's claim spec
    return namespace, name, claim_spec(spec)


# ---- the store ---------------------------------------------------------------------------

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_Specs = dict[str, dict[str, ClaimSpec]]  # namespace -> name -> spec


class DraCache:
    """The DRA kinds of a cluster: DeviceClasses, and templates and claims per namespace.

    A kind is unknown (None) until it is listed or found not served; a 404 makes it known
    and empty (DRA not installed), a 403 unknown again. Writers replace a namespace's map
    (and the class map) whole, so a reader's `DraFacts` never changes under it.
    """

    def __init__(self) -> None:
        self._classes: dict[str, DeviceClass] | None = None
        self._specs: dict[str, _Specs | None] = {
            "resourceclaimtemplates": None,
            "resourceclaims": None,
        }
        self._devices: dict[str, dict[str, Amount]] = {}  # namespace -> key -> devices
        self._slices = SliceStore()  # ResourceSlices: devices per node and driver
        # The class map `served_names` last read, and its answer.
        self._served: tuple[dict[str, DeviceClass] | None, frozenset[str]] = (None, frozenset())

    def facts_for(self, namespace: str) -> DraFacts | None:
        templates = self._specs["resourceclaimtemplates"]
        claims = self._specs["resourceclaims"]
        nodes = self._slices.by_node()
        if self._classes is None and templates is None and claims is None and nodes is None:
            return None
        return DraFacts(
            self._classes,
            None if templates is None else templates.get(namespace, _EMPTY),
            None if claims is None else claims.get(namespace, _EMPTY),
            self._devices.get(namespace, _EMPTY),
            nodes,
        )

    def served_names(self) -> frozenset[str]:
        """The `extendedResourceName`s of the known DeviceClasses (kept with the class map:
        asked on every review by the fast path)."""
        classes = self._classes
        if classes is not self._served[0]:
            names = frozenset(c.extended_resource_name for c in (classes or {}).values())
            self._served = (classes, names - {""})
        return self._served[1]

    def claim_devices(self) -> Mapping[str, Mapping[str, Amount]]:
        """Devices the ResourceClaims of each namespace take, by class key (never edited
        in place: a claim's event replaces its namespace's value)."""
        return self._devices

    def replace(self, kind: str, items: Iterable[tuple[str, str, Any]]) -> None:
        """A whole list of `kind` (`reduce`d): what was there before is gone."""
        if kind == "deviceclasses":
            self._classes = {name: value for _, name, value in items}
            return
        if kind == SLICES:
            self._slices.replace(items)
            return
        specs: _Specs = {}
        for namespace, name, value in items:
            specs.setdefault(namespace, {})[name] = value
        self._specs[kind] = specs
        if kind == "resourceclaims":
            self._devices = {ns: _total(by_name.values()) for ns, by_name in specs.items()}

    def put(self, kind: str, namespace: str, name: str, value: Any | None) -> None:
        """One object added or changed (`value`), or deleted (None)."""
        if kind == "deviceclasses":
            classes = dict(self._classes or {})
            if value is None:
                classes.pop(name, None)
            else:
                classes[name] = value
            self._classes = classes
            return
        if kind == SLICES:
            self._slices.put(name, value)
            return
        specs = self._specs[kind]
        if specs is None:
            return  # not listed yet: the list will bring it
        current = specs.get(namespace, {})
        if current.get(name) == value:
            return
        changed = dict(current)
        if value is None:
            changed.pop(name, None)
        else:
            changed[name] = value
        if changed:
            specs[namespace] = changed
        else:
            specs.pop(namespace, None)
        if kind == "resourceclaims":
            self._devices[namespace] = _total(changed.values())

    def not_served(self, kind: str, status: int) -> bool:
        """Whether a failed list is the answer: 404 (DRA is not served: known, nothing there)
        or 403 (not allowed: unknown, warned). Anything else is an error to retry."""
        if status not in (404, 403):
            return False
        forbidden = status == 403
        if kind == "deviceclasses":
            self._classes = None if forbidden else {}
        elif kind == SLICES:
            self._slices.not_served(forbidden=forbidden)
        else:
            self._specs[kind] = None if forbidden else {}
            if kind == "resourceclaims":
                self._devices = {}
        if forbidden:
            log.warning(
                "%s: not allowed to list them (403); pods' DRA claims are unknown, so they "
                "make no pod a GPU pod",
                kind,
            )
        else:
            log.info("%s: not installed (404)", kind)
        return True


def _total(specs: Iterable[ClaimSpec]) -> dict[str, Amount]:
    out: dict[str, Amount] = {}
    for spec in specs:
        for key, n in devices_of(spec, all_as=1).items():
            out[key] = out.get(key, 0) + n
    return out
