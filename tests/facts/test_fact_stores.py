"""The table of watched kinds and the stores it names: what a failed list means for each kind,
and what one watch event does to the facts a review reads, without an API server."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.facts.live import LiveCache
from webhook.facts.provisioning import MAX_SIZE
from webhook.facts.stores import Stores
from webhook.facts.watched import (
    DRA_KINDS,
    KINDS,
    PROVISIONING_KINDS,
    QUEUE_KINDS,
    SERVING_KINDS,
    WATCHED,
    WEBHOOK_KINDS,
)
from webhook.namepatterns import NamePatterns


def _stores() -> Stores:
    return LiveCache(None).stores  # never started: no client call is made


def _event(stores: Stores, kind: str, obj: dict[str, Any], deleted: bool = False) -> None:
    """One watch event as the cache applies it: the row's reducer, then its store."""
    row = WATCHED[kind]
    meta = obj["metadata"]
    item = None if deleted else row.reduce(kind, obj, stores.nodes)
    value = None if item is None else item[2]
    stores.named[row.store].put(kind, meta.get("namespace", ""), meta["name"], value)


def test_every_kind_the_cache_serves_is_one_row_whose_store_exists() -> None:
    every = KINDS + PROVISIONING_KINDS + DRA_KINDS + SERVING_KINDS + WEBHOOK_KINDS + QUEUE_KINDS
    assert [row.kind for row in WATCHED.values()] == list(every)
    stores = _stores()
    for name, row in WATCHED.items():
        assert row.store in stores.named, name
        assert row.optional == (row.kind not in KINDS), name
    # A pod's GPU product is its node's: the pods wait for the nodes' first list.
    assert WATCHED["pods"].after == "nodes" and "nodes" in WATCHED


@pytest.mark.parametrize("kind", list(WATCHED))
def test_a_failed_list_is_an_answer_only_where_the_kind_may_be_absent(kind: str) -> None:
    """404 and 403 on an optional kind are facts (not served: known empty; forbidden:
    unknown); on a core kind an error retried, except a 403 on ConfigMaps (envFrom unknown)
    in a one-shot list. A server error is never an answer: nothing is recorded."""
    store = _stores().named[WATCHED[kind].store]
    assert store.not_served(kind, 500) is False
    assert store.not_served(kind, 410) is False
    optional = WATCHED[kind].optional
    assert store.not_served(kind, 404) is optional
    assert store.not_served(kind, 403) is (optional or kind == "configmaps")


def test_optional_families_are_unknown_until_listed_known_when_absent_unknown_when_forbidden() -> (
    None
):
    stores = _stores()
    assert stores.facts_for("ml-team", None).dra is None
    assert stores.facts_for("ml-team", None).queues is None
    assert stores.facts_for("ml-team", None).serving_runtimes is None
    for row in WATCHED.values():
        if row.store in ("dra", "queues", "runtimes"):
            assert stores.named[row.store].not_served(row.kind.name, 404)
    facts = stores.facts_for("ml-team", None)
    assert facts.dra is not None and facts.dra.device_classes == {} and facts.dra.claims == {}
    assert facts.queues is not None and facts.queues.cluster_queues == {}
    assert facts.serving_runtimes is not None and not facts.serving_runtimes.cluster
    stores.named["dra"].not_served("resourceclaims", 403)
    stores.named["runtimes"].not_served("clusterservingruntimes", 403)
    facts = stores.facts_for("ml-team", None)
    assert facts.dra is not None and facts.dra.claims is None  # forbidden: unknown again
    assert facts.serving_runtimes is None


def _machine_set(name: str, **notes: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "capi",
            "annotations": {MAX_SIZE[0]: "4", **notes},
        }
    }


def test_an_autoscaler_object_that_cannot_be_told_makes_provisioning_unknown_until_it_goes() -> (
    None
):
    stores = _stores()
    everywhere = NamePatterns(["*"])
    assert stores.provisioning.facts_for("") is None  # nothing listed yet
    for row in WATCHED.values():
        if row.store == "provisioning" and row.kind.name != "machinesets":
            stores.provisioning.not_served(row.kind.name, 404)
    stores.provisioning.replace("machinesets", [])
    told = stores.provisioning.facts_for("")
    assert told is not None and told.shapes(everywhere) == ()
    # Grows, with no capacity stated: cluster-autoscaler reads it elsewhere, we cannot.
    _event(stores, "machinesets", _machine_set("untold"))
    untold = stores.provisioning.facts_for("")
    assert untold is not None and untold.shapes(everywhere) is None
    gpus = {
        "capacity.cluster-autoscaler.kubernetes.io/gpu-count": "8",
        "capacity.cluster-autoscaler.kubernetes.io/gpu-type": "nvidia.com/gpu",
    }
    _event(stores, "machinesets", _machine_set("h100", **gpus))
    both = stores.provisioning.facts_for("")
    assert both is not None and both.shapes(everywhere) is None  # one untold is enough
    _event(stores, "machinesets", _machine_set("untold"), deleted=True)
    left = stores.provisioning.facts_for("")
    assert left is not None
    shapes = left.shapes(everywhere)
    assert shapes is not None and [s.gpus for s in shapes] == [{"nvidia.com/gpu": 8}]


def _pod(name: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml-team"},
        "spec": {
            "nodeName": "h100-0",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def test_watch_events_through_the_table_keep_usage_and_products_in_step() -> None:
    stores = _stores()
    node = {
        "metadata": {"name": "h100-0", "labels": {"nvidia.com/gpu.product": "H100"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    reduced = WATCHED["nodes"].reduce("nodes", node, stores.nodes)
    assert reduced is not None
    stores.nodes.replace("nodes", [reduced])
    pods = [_pod("a", 2), _pod("b", 1), {"metadata": {"name": "web", "namespace": "ml-team"}}]
    listed = [WATCHED["pods"].reduce("pods", p, stores.nodes) for p in pods]
    stores.pods.replace("pods", [item for item in listed if item is not None])
    taken = stores.facts_for("ml-team", 1.0)
    assert taken.usage.by_product[("nvidia.com/gpu", "H100")] == 3
    assert stores.pods.count() == 2  # the pod of no GPU is not kept
    _event(stores, "pods", _pod("a", 2, phase="Succeeded"))  # finished: frees its GPUs
    _event(stores, "pods", _pod("c", 4))
    _event(stores, "pods", _pod("b", 1), deleted=True)
    now = stores.facts_for("ml-team", 1.0)
    assert now.usage.by_resource["nvidia.com/gpu"] == 4
    assert taken.usage.by_resource["nvidia.com/gpu"] == 3  # a review's facts never change
    assert now.age_seconds == 1.0 and now.nodes.nodes[0].name == "h100-0"
