"""The live cache reads DRA objects from an API server that speaks the real list/watch protocol.

DeviceClasses, ResourceClaimTemplates, ResourceClaims and ResourceSlices are listed and watched
like the autoscalers' kinds: optional (a 404 is "DRA not served": known, nothing there; a 403
leaves them unknown), never holding up `synced`, and reduced to the values the rules read.
"""

from __future__ import annotations

import logging
from fractions import Fraction

import pytest

from tests.support.dra import CLASSES, GPU_KEY, claim, exactly, template
from tests.support.fake_apiserver import FakeApiServer
from tests.support.live import cluster_role_grants, eventually, live_cache
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.facts.dra import DraFacts
from webhook.facts.live import DRA_KINDS, LiveCache
from webhook.facts.model import PodGpus
from webhook.facts.reservations import Reservations
from webhook.ruleset.models import RuleSet


def dra_of(live: LiveCache, ns: str = "ml-team") -> DraFacts | None:
    return live.facts_for(ns).dra


def test_dra_objects_are_listed_then_followed_by_the_watch(server: FakeApiServer) -> None:
    server.load("deviceclasses", [dict(c) for c in CLASSES])
    server.load("resourceclaimtemplates", [template("one-gpu", exactly("g", "gpu.nvidia.com"))])
    server.load("resourceclaims", [claim("shared", exactly("g", "gpu.nvidia.com", 2))])
    live = live_cache(server)
    live.start()
    try:
        assert live.wait_synced(10)
        # Each DRA kind is listed by its own thread, none of them part of `synced`.
        eventually(
            lambda: (
                (d := dra_of(live)) is not None
                and None not in (d.claims, d.device_classes, d.templates)
            )
        )
        facts = dra_of(live)
        assert facts is not None and facts.device_classes is not None
        assert facts.device_classes["h100-training"].drivers == ("gpu.nvidia.com",)
        assert facts.templates is not None and set(facts.templates) == {"one-gpu"}
        assert facts.claim_devices == {GPU_KEY: 2}

        server.put(
            "resourceclaimtemplates", template("two-gpus", exactly("g", "gpu.nvidia.com", 2))
        )
        server.put("resourceclaims", claim("p-gpu-1", exactly("g", "gpu.nvidia.com"), owner="p"))
        server.delete("deviceclasses", "", "nic.example.com")
        eventually(lambda: dra_of(live).claim_devices == {GPU_KEY: 3})  # type: ignore[union-attr]
        eventually(lambda: set(dra_of(live).templates or ()) == {"one-gpu", "two-gpus"})  # type: ignore[union-attr]
        eventually(lambda: "nic.example.com" not in (dra_of(live).device_classes or {}))  # type: ignore[union-attr]
        assert facts.claim_devices == {GPU_KEY: 2}  # what a request took does not change
        server.delete("resourceclaims", "ml-team", "shared")
        eventually(lambda: dra_of(live).claim_devices == {GPU_KEY: 1})  # type: ignore[union-attr]
        assert dra_of(live, "other").claims == {}  # type: ignore[union-attr]
    finally:
        live.stop()


def test_the_webhook_judges_a_dra_pod_on_live_facts(server: FakeApiServer) -> None:
    server.load("deviceclasses", [dict(c) for c in CLASSES])
    server.load("resourceclaimtemplates", [template("one-gpu", exactly("g", "gpu.nvidia.com"))])
    live = live_cache(server)
    live.list_once()  # the live audit's one-shot read takes the DRA kinds too
    assert all(server.lists[k.name] == 1 for k in DRA_KINDS)
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [{"name": "m", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }
    rules = compile_rules(RuleSet())
    decision = evaluate(
        subject_for(obj, namespace="ml-team"), rules, live.facts_for("ml-team"), stage=Stage.ADMIT
    )
    assert any(op["path"] == "/spec/tolerations" for op in decision.patch)
    assert decision.hold is not None and decision.hold.gpus == {GPU_KEY: Fraction(1)}


def test_dra_not_served_is_known_empty_and_does_not_hold_up_the_sync(
    server: FakeApiServer,
) -> None:
    server.missing = {k.name for k in DRA_KINDS}
    live = live_cache(server, recheck_seconds=0.2)
    live.start()
    try:
        assert live.wait_synced(10)
        # Each kind is found missing on its own: wait until all three are known.
        eventually(
            lambda: (
                (d := dra_of(live)) is not None
                and None not in (d.device_classes, d.templates, d.claims)
            )
        )
        facts = dra_of(live)
        assert facts is not None
        assert (facts.device_classes, facts.templates, facts.claims) == ({}, {}, {})
        server.missing = set()  # DRA enabled later: the recheck finds it
        server.put("deviceclasses", dict(CLASSES[0]))
        eventually(lambda: "gpu.nvidia.com" in (dra_of(live).device_classes or {}))  # type: ignore[union-attr]
    finally:
        live.stop()


def test_dra_kinds_we_may_not_read_stay_unknown_and_are_warned(
    server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.forbidden = {"resourceclaimtemplates"}
    server.load("deviceclasses", [dict(CLASSES[0])])
    live = live_cache(server)
    with caplog.at_level(logging.WARNING, logger="gpu-admission.cache"):
        live.list_once()
    facts = dra_of(live)
    assert facts is not None and facts.templates is None and facts.device_classes is not None
    assert "resourceclaimtemplates: not allowed to list them (403)" in caplog.text


def test_the_claim_made_for_an_admitted_pod_ends_its_hold(server: FakeApiServer) -> None:
    holds = Reservations(ttl=60)
    live = live_cache(server, reservations=holds)
    live.start()
    try:
        assert live.wait_synced(10)
        eventually(lambda: (d := dra_of(live)) is not None and d.claims is not None)
        holds.hold(PodGpus("ml-team", "train-0", "Pending", {GPU_KEY: Fraction(1)}))
        assert holds.count == 1
        # The pod itself asks for no extended resource: the pod watch keeps nothing of it.
        server.put(
            "pods",
            {
                "metadata": {"name": "train-0", "namespace": "ml-team"},
                "spec": {"containers": [{"name": "m"}]},
            },
        )
        # A GPU pod put after it, which the pod watch does keep: once its hold has gone, the
        # watch has handled train-0 too (events arrive in order).
        holds.hold(PodGpus("ml-team", "marker", "Pending", {"nvidia.com/gpu": Fraction(1)}))
        server.put(
            "pods",
            {
                "metadata": {"name": "marker", "namespace": "ml-team"},
                "spec": {
                    "containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
                },
                "status": {"phase": "Pending"},
            },
        )
        eventually(lambda: holds.count == 1)
        assert [p.name for p in holds.held("ml-team")] == ["train-0"]
        server.put(
            "resourceclaims",
            claim("train-0-gpu-x", exactly("g", "gpu.nvidia.com"), owner="train-0"),
        )
        eventually(lambda: holds.count == 0)
        assert dra_of(live).claim_devices == {GPU_KEY: 1}  # type: ignore[union-attr]
    finally:
        live.stop()


def test_the_cluster_role_grants_reading_every_dra_kind() -> None:
    granted = cluster_role_grants()
    for kind in DRA_KINDS:
        assert {"list", "watch"} <= granted.get((kind.group, kind.name), set()), kind


def _slice(name: str, node: str, gpus: int) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(gpus)],
        },
    }


def test_resource_slices_are_counted_per_node_and_followed(server: FakeApiServer) -> None:
    """How many GPUs DRA drivers publish on each node: what the whole-node exception counts."""
    server.load("resourceslices", [_slice("n1-gpu", "n1", 16)])
    live = live_cache(server)
    live.start()
    try:
        assert live.wait_synced(10)
        eventually(lambda: (d := dra_of(live)) is not None and d.node_devices is not None)
        facts = dra_of(live)
        assert facts is not None and facts.node_devices == {"n1": {"gpu.nvidia.com": 16}}
        server.put("resourceslices", _slice("n2-gpu", "n2", 8))
        server.delete("resourceslices", "", "n1-gpu")
        eventually(lambda: dra_of(live).node_devices == {"n2": {"gpu.nvidia.com": 8}})  # type: ignore[union-attr]
        assert facts.node_devices == {"n1": {"gpu.nvidia.com": 16}}  # a review's view stays
    finally:
        live.stop()


def test_a_403_after_a_restart_keeps_what_was_listed_and_retries_soon(
    server: FakeApiServer,
) -> None:
    """A restarted apiserver answers 403 until its RBAC cache has synced: a kind that was
    readable before is not forgotten for minutes, it is listed again as soon as it may be."""
    server.load("deviceclasses", [dict(CLASSES[0])])
    live = live_cache(server, recheck_seconds=300)
    live.start()
    try:
        assert live.wait_synced(10)
        eventually(lambda: (d := dra_of(live)) is not None and d.device_classes is not None)
        refused = server.lists["deviceclasses"]
        server.forbidden = {"deviceclasses"}
        server.drop_watches()
        eventually(lambda: server.lists["deviceclasses"] > refused)  # a 403 was answered
        # still known while the authorizer says no
        facts = dra_of(live)
        assert facts is not None and facts.device_classes is not None
        server.forbidden = set()
        server.put("deviceclasses", {**CLASSES[0], "metadata": {"name": "second.example.com"}})
        eventually(
            lambda: (
                (d := dra_of(live)) is not None
                and d.device_classes is not None
                and "second.example.com" in d.device_classes
            ),
            seconds=10,
        )
    finally:
        live.stop()
