"""The live cache against an API server that speaks the real list/watch protocol."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import pytest
from fake_apiserver import FakeApiServer
from kubernetes import client

from webhook.facts.live import LiveCache
from webhook.facts.model import PodGpus
from webhook.facts.reservations import Reservations


def gpu_pod(name: str, ns: str = "ml-team", gpus: int = 1, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": "h100-0",
            "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "2"}}}
            ],
        },
        "status": {"phase": "Running", **status},
    }


def seed(server: FakeApiServer, pods: int = 7) -> None:
    server.put("namespaces", {"metadata": {"name": "ml-team", "labels": {"team": "ml"}}})
    server.put(
        "nodes",
        {
            "metadata": {"name": "h100-0", "labels": {"nvidia.com/gpu.product": "H100"}},
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"}},
        },
    )
    server.put(
        "resourcequotas",
        {
            "metadata": {"name": "gpu", "namespace": "ml-team"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "16"}},
            "status": {
                "hard": {"requests.nvidia.com/gpu": "16"},
                "used": {"requests.nvidia.com/gpu": "7"},
            },
        },
    )
    server.put("priorityclasses", {"metadata": {"name": "gpu-high"}, "value": 1000})
    for i in range(pods):
        server.put("pods", gpu_pod(f"p{i}"))
    server.put(
        "pods",
        {
            "metadata": {"name": "web", "namespace": "ml-team"},
            "spec": {"containers": [{"name": "w"}]},
        },
    )


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    srv = FakeApiServer()
    srv.start()
    seed(srv)
    yield srv
    srv.stop()


@pytest.fixture
def cache(server: FakeApiServer) -> Iterator[LiveCache]:
    cfg = client.Configuration()
    cfg.host = server.url
    live = LiveCache(client.ApiClient(cfg), page_size=3, watch_timeout=5, max_backoff=0.5)
    live.start()
    assert live.wait_synced(10)
    yield live
    live.stop()


def eventually(check: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)


def used(cache: LiveCache, ns: str = "ml-team") -> Fraction:
    return cache.facts_for(ns).usage.by_resource.get("nvidia.com/gpu", Fraction(0))


def test_the_initial_list_is_paged_and_fills_every_kind(
    cache: LiveCache, server: FakeApiServer
) -> None:
    assert server.lists["pods"] == 1
    assert server.pages["pods"] == 3  # 8 pods in pages of 3
    assert used(cache) == 7
    assert cache.pod_count == 7  # the non-GPU pod is not kept
    facts = cache.facts_for("ml-team")
    assert facts.namespace_labels == {"team": "ml"}
    assert facts.nodes.nodes[0].gpus == {"nvidia.com/gpu": 8}
    assert facts.quotas[0].used == {"requests.nvidia.com/gpu": 7}
    assert facts.priority_class("gpu-high").value == 1000  # type: ignore[union-attr]
    assert facts.usage.by_product[("nvidia.com/gpu", "H100")] == 7
    assert cache.age_seconds() is not None and cache.age_seconds() < 5  # type: ignore[operator]


def test_watch_events_update_usage(cache: LiveCache, server: FakeApiServer) -> None:
    server.put("pods", gpu_pod("big", gpus=4))
    eventually(lambda: used(cache) == 11)
    server.put("pods", gpu_pod("big", gpus=4, phase="Succeeded"))  # finished pods free GPUs
    eventually(lambda: used(cache) == 7)
    server.delete("pods", "ml-team", "p0")
    eventually(lambda: used(cache) == 6)
    server.put("namespaces", {"metadata": {"name": "ml-team", "labels": {"team": "ml2"}}})
    eventually(lambda: cache.facts_for("ml-team").namespace_labels == {"team": "ml2"})


def test_facts_taken_for_a_request_do_not_change_under_the_watch(
    cache: LiveCache, server: FakeApiServer
) -> None:
    """A request judges one consistent state: the watch replaces values, never edits them."""
    taken = cache.facts_for("ml-team")
    classes = dict(taken.priority_classes)
    server.put("pods", gpu_pod("late", gpus=2))
    server.put(
        "priorityclasses",
        {"metadata": {"name": "gpu-low"}, "value": 10, "preemptionPolicy": "Never"},
    )
    eventually(lambda: used(cache) == 9 and cache.facts_for("x").priority_class("gpu-low"))
    assert taken.usage.by_resource["nvidia.com/gpu"] == 7
    assert dict(taken.priority_classes) == classes


def test_watches_resume_from_bookmarks(cache: LiveCache, server: FakeApiServer) -> None:
    server.put("namespaces", {"metadata": {"name": "other"}})  # moves the global version on
    newest = server.rv
    server.drop_watches()
    # The pods watch saw no pod event since, but bookmarks told it the newer version.
    eventually(lambda: any(k == "pods" and int(rv) >= newest for k, rv in server.watches[-5:]))
    assert server.lists["pods"] == 1


def test_a_dropped_connection_resumes_without_relisting(
    cache: LiveCache, server: FakeApiServer
) -> None:
    server.drop_watches()
    server.put("pods", gpu_pod("after-drop", gpus=2))
    eventually(lambda: used(cache) == 9)
    assert server.lists["pods"] == 1


def test_410_gone_forces_a_relist_that_converges(cache: LiveCache, server: FakeApiServer) -> None:
    server.put("pods", gpu_pod("during-gap", gpus=3))
    server.compact()  # the server forgets everything up to now
    server.drop_watches()  # so the resumed watch asks for a version it no longer has
    eventually(lambda: server.gone["pods"] >= 1)
    eventually(lambda: server.lists["pods"] >= 2)
    eventually(lambda: used(cache) == 10)


def test_an_outage_makes_facts_stale_and_recovery_makes_them_fresh(
    cache: LiveCache, server: FakeApiServer
) -> None:
    server.set_down(True)
    server.drop_watches()
    time.sleep(1.0)
    assert cache.age_seconds() > 0.8  # type: ignore[operator]
    server.set_down(False)
    server.put("pods", gpu_pod("after-outage", gpus=1))
    eventually(lambda: used(cache) == 8 and cache.age_seconds() < 0.8)  # type: ignore[operator]


def test_a_pod_seen_by_the_watch_releases_its_reservation(server: FakeApiServer) -> None:
    cfg = client.Configuration()
    cfg.host = server.url
    holds = Reservations(ttl=60)
    live = LiveCache(client.ApiClient(cfg), reservations=holds, watch_timeout=5)
    live.start()
    try:
        assert live.wait_synced(10)
        holds.hold(PodGpus("ml-team", "train-", "Pending", {"nvidia.com/gpu": Fraction(2)}))
        assert len(holds.held("ml-team")) == 1
        server.put("pods", gpu_pod("train-x7k2", gpus=2))
        eventually(lambda: not holds.held("ml-team"))
    finally:
        live.stop()


@pytest.fixture
def served(server: FakeApiServer, webhook_with: Any, tmp_path: Any) -> Any:
    """The real webhook reading its cluster facts from the fake API server."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(server.kubeconfig())
    hook = webhook_with(
        {
            "gpu-quota": {
                "budgets": [
                    {"name": "ml", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 8}}
                ],
                "whenUnknown": "deny",
            }
        },
        args=("--kubeconfig", str(kubeconfig)),
        cluster={"maxStalenessSeconds": 2},
    )
    return hook


def two_gpus() -> dict[str, Any]:
    pod = gpu_pod("new", gpus=2)
    pod["metadata"] = {"generateName": "new-"}
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    pod["spec"]["containers"][0]["resources"]["limits"]["memory"] = "8Gi"
    pod["spec"]["containers"][0]["readinessProbe"] = {"tcpSocket": {"port": 80}}
    return pod


def test_the_webhook_decides_on_live_facts_and_follows_the_watch(
    served: Any, server: FakeApiServer
) -> None:
    verdict = served.validate(two_gpus(), namespace="ml-team")
    assert not verdict.allowed
    assert "uses 7 of 8 nvidia.com/gpu; this pod asks 2" in verdict.message
    server.delete("pods", "ml-team", "p0")
    eventually(lambda: served.validate(two_gpus(), namespace="ml-team").allowed)


def test_an_unreachable_api_server_follows_when_unknown_and_recovers(
    served: Any, server: FakeApiServer
) -> None:
    server.delete("pods", "ml-team", "p0")
    eventually(lambda: served.validate(two_gpus(), namespace="ml-team", dry_run=True).allowed)
    server.set_down(True)
    # dryRun throughout: a real admitted create would hold its GPUs for the reservation TTL.
    eventually(
        lambda: (
            "cluster facts are"
            in served.validate(two_gpus(), namespace="ml-team", dry_run=True).message
        )
    )
    assert not served.validate(two_gpus(), namespace="ml-team", dry_run=True).allowed
    server.set_down(False)
    eventually(lambda: served.validate(two_gpus(), namespace="ml-team", dry_run=True).allowed)
