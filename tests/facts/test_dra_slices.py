"""ResourceSlices as devices per node and driver: what the whole-node exception counts, kept
exact through lists, events and a 403, and read from a snapshot's `resourceSlices`."""

from __future__ import annotations

from typing import Any

from webhook.facts import dra
from webhook.facts.draslices import ANY_NODE, slice_devices


def _slice(name: str, node: str | None, n: int, driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "devices": [{"name": f"d{i}"} for i in range(n)]}
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"metadata": {"name": name}, "spec": spec}


def _reduced(obj: dict[str, Any]) -> tuple[str, str, Any]:
    return dra.reduce("resourceslices", obj)


def test_a_slice_is_its_node_its_driver_and_its_device_count() -> None:
    found = slice_devices(_slice("a", "n1", 3))
    assert (found.node, found.driver, found.count) == ("n1", "gpu.nvidia.com", 3)
    assert slice_devices(_slice("b", None, 2)).node == ANY_NODE
    odd = slice_devices({"spec": {"nodeName": 7, "devices": "x"}})
    assert (odd.node, odd.driver, odd.count) == (ANY_NODE, "", 0)
    shared = _slice("c", "n1", 1)
    shared["spec"]["perDeviceNodeSelection"] = True  # each device names its own nodes
    assert slice_devices(shared).node == ANY_NODE


def test_lists_and_events_keep_the_counts_exact() -> None:
    cache = dra.DraCache()
    assert cache.facts_for("ml-team") is None  # nothing known yet
    cache.replace(
        "resourceslices", [_reduced(_slice("a", "n1", 8)), _reduced(_slice("b", "n1", 8))]
    )
    facts = cache.facts_for("ml-team")
    assert facts is not None and facts.node_devices == {"n1": {"gpu.nvidia.com": 16}}
    before = facts.node_devices
    cache.put("resourceslices", "", "b", None)
    cache.put("resourceslices", "", "c", _reduced(_slice("c", "n2", 4, "gpu.amd.com"))[2])
    after = cache.facts_for("ml-team")
    assert after is not None
    assert after.node_devices == {"n1": {"gpu.nvidia.com": 8}, "n2": {"gpu.amd.com": 4}}
    assert before == {"n1": {"gpu.nvidia.com": 16}}  # a reader's view never changes under it
    cache.put("resourceslices", "", "a", None)
    cache.put("resourceslices", "", "c", None)
    empty = cache.facts_for("ml-team")
    assert empty is not None and empty.node_devices == {}


def test_not_served_is_known_and_empty_and_forbidden_is_unknown() -> None:
    cache = dra.DraCache()
    cache.not_served("resourceslices", 404)
    facts = cache.facts_for("ml-team")
    assert facts is not None and facts.node_devices == {}
    cache.not_served("resourceslices", 403)
    assert cache.facts_for("ml-team") is None
