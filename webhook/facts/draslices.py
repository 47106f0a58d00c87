"""ResourceSlices as the whole-node exception reads them: how many devices each DRA driver
publishes on each node (pure readers and one store).

A node's GPUs served through DRA are in no node's allocatable: only the ResourceSlices its
drivers publish say how many there are. A pod that fills a node's device-plugin GPUs shares the
node with whoever claims its DRA GPUs, so `privileged-gpu` and `host-gpu-devices` count them.
A slice bound to no single node (`allNodes`, `nodeSelector`, or per-device node selection)
counts towards every node: more devices only ever withholds the exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["ANY_NODE", "KIND", "SliceDevices", "SliceStore", "slice_devices"]

KIND = "resourceslices"
ANY_NODE = ""  # devices a slice offers to more than one node


@dataclass(frozen=True, slots=True)
class SliceDevices:
    node: str  # ANY_NODE when the slice is not bound to one node
    driver: str
    count: int


def slice_devices(obj: Mapping[str, Any]) -> SliceDevices:
    """One ResourceSlice (resource.k8s.io/v1 or v1beta1): its node, driver and device count."""
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    node = spec.get("nodeName")
    devices = spec.get("devices")
    driver = spec.get("driver")
    bound = isinstance(node, str) and node and not spec.get("perDeviceNodeSelection")
    return SliceDevices(
        node=node if bound and isinstance(node, str) else ANY_NODE,
        driver=driver if isinstance(driver, str) else "",
        count=len(devices) if isinstance(devices, list) else 0,
    )


_Counts = dict[str, Mapping[str, int]]  # node -> driver -> devices


def _add(counts: _Counts, found: SliceDevices, sign: int) -> None:
    """Add (or take away) one slice's devices, copying only the node's map it changes."""
    drivers = dict(counts.get(found.node, {}))
    drivers[found.driver] = drivers.get(found.driver, 0) + sign * found.count
    if drivers[found.driver] <= 0:
        del drivers[found.driver]
    if drivers:
        counts[found.node] = drivers
    else:
        counts.pop(found.node, None)


class SliceStore:
    """Every ResourceSlice of the cluster, and devices per node and driver from them.

    Unknown (None) until listed or found not served (404: known, none; 403: unknown). The
    per-node map is replaced on every change, never edited, so a reader's view is stable.
    """

    def __init__(self) -> None:
        self._slices: dict[str, SliceDevices] | None = None
        self._counts: Mapping[str, Mapping[str, int]] = MappingProxyType({})

    def by_node(self) -> Mapping[str, Mapping[str, int]] | None:
        """node (ANY_NODE for slices of several) -> driver -> devices; None: not known."""
        return None if self._slices is None else self._counts

    def replace(self, items: Iterable[tuple[str, str, Any]]) -> None:
        slices = {name: value for _, name, value in items if isinstance(value, SliceDevices)}
        counts: _Counts = {}
        for found in slices.values():
            _add(counts, found, 1)
        self._slices = slices
        self._counts = MappingProxyType(counts)

    def put(self, name: str, value: SliceDevices | None) -> None:
        if self._slices is None:
            return  # not listed yet: the list will bring it
        old = self._slices.get(name)
        if old == value:
            return
        counts = dict(self._counts)
        if old is not None:
            _add(counts, old, -1)
            del self._slices[name]
        if value is not None:
            _add(counts, value, 1)
            self._slices[name] = value
        self._counts = MappingProxyType(counts)

    def not_served(self, *, forbidden: bool) -> None:
        self._slices = None if forbidden else {}
        self._counts = MappingProxyType({})
