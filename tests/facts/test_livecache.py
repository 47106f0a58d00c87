"""The live cache against an API server that speaks the real list/watch protocol."""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from kubernetes import client

from tests.support.cluster import config_map, gpu_node, gpu_pod, seed
from tests.support.fake_apiserver import FakeApiServer
from tests.support.live import cluster_role_grants, eventually
from webhook.facts.live import KINDS, LiveCache
from webhook.facts.model import PodGpus
from webhook.facts.objects import pod_summary
from webhook.facts.reservations import Reservations


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


def test_a_stopped_cache_holds_no_connection_to_the_api_server(server: FakeApiServer) -> None:
    """Nothing the cache opened outlives it: after the live audit's one-shot list its client
    keeps the connection alive for another request; stopping the cache closes it."""
    cfg = client.Configuration()
    cfg.host = server.url
    live = LiveCache(client.ApiClient(cfg))
    live.list_once()
    assert server.open_connections() >= 1  # kept alive by the client's pool
    live.stop()
    eventually(lambda: server.open_connections() == 0)


def used(cache: LiveCache, ns: str = "ml-team") -> Fraction:
    return cache.facts_for(ns).usage.by_resource.get("nvidia.com/gpu", Fraction(0))  # type: ignore[return-value]


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
    time.sleep(3 * server.bookmark_interval)  # a bookmark past `newest` reaches every watch
    seen = len(server.watches)
    server.drop_watches()
    # The pods watch saw no pod event since, but bookmarks told it the newer version.
    eventually(lambda: any(k == "pods" and int(rv) >= newest for k, rv in server.watches[seen:]))
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
    eventually(lambda: cache.age_seconds() > 0.8)  # type: ignore[operator]
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


# ---- node taints ------------------------------------------------------------------------


def test_node_taints_reach_the_facts_and_follow_the_watch(
    cache: LiveCache, server: FakeApiServer
) -> None:
    nodes = cache.facts_for("ml-team").nodes
    assert nodes.node("h100-0") is nodes.nodes[0]
    assert nodes.node("h100-0").taints == (  # type: ignore[union-attr]
        ("nvidia.com/gpu", "", "NoSchedule"),
        ("dedicated", "ml", "NoExecute"),
    )
    assert nodes.node("h100-9") is None
    server.put("nodes", gpu_node(taints=[]))
    eventually(lambda: cache.facts_for("ml-team").nodes.node("h100-0").taints == ())  # type: ignore[union-attr]
    assert nodes.node("h100-0").taints != ()  # type: ignore[union-attr]  # the old index as taken


# ---- ConfigMaps ---------------------------------------------------------------------------


def test_listed_config_maps_keep_only_keys_that_could_become_nvidia_visible_devices(
    cache: LiveCache, server: FakeApiServer
) -> None:
    assert server.lists["configmaps"] == 1
    assert server.pages["configmaps"] == 1  # 3 ConfigMaps in pages of 3
    assert cache.facts_for("ml-team").config_maps == {
        "gpu-env": {"NVIDIA_VISIBLE_DEVICES": "all"},
        "suffix-only": {"DEVICES": "0,1"},
    }  # "app-config" has no such key: not kept at all, which reads as "no such key"
    assert cache.facts_for("elsewhere").config_maps == {}  # known and empty, not None


def test_config_map_watch_events_add_change_and_remove_keys(
    cache: LiveCache, server: FakeApiServer
) -> None:
    def kept() -> Any:
        return cache.facts_for("ml-team").config_maps

    taken = kept()
    server.put("configmaps", config_map("late", NVIDIA_VISIBLE_DEVICES="void"))  # ADDED
    eventually(lambda: kept().get("late") == {"NVIDIA_VISIBLE_DEVICES": "void"})
    server.put("configmaps", config_map("late", NVIDIA_VISIBLE_DEVICES="0"))  # MODIFIED
    eventually(lambda: kept().get("late") == {"NVIDIA_VISIBLE_DEVICES": "0"})
    server.put("configmaps", config_map("gpu-env", LOG="debug"))  # MODIFIED: key removed
    eventually(lambda: "gpu-env" not in kept())
    server.delete("configmaps", "ml-team", "late")  # DELETED
    eventually(lambda: "late" not in kept())
    server.put("configmaps", config_map("app-config", NVIDIA_VISIBLE_DEVICES="all"))  # gains it
    eventually(lambda: kept().get("app-config") == {"NVIDIA_VISIBLE_DEVICES": "all"})
    server.put("configmaps", config_map("other-ns", ns="team-b", VISIBLE_DEVICES="all"))
    eventually(
        lambda: cache.facts_for("team-b").config_maps == {"other-ns": {"VISIBLE_DEVICES": "all"}}
    )
    assert kept() == {
        "suffix-only": {"DEVICES": "0,1"},
        "app-config": {"NVIDIA_VISIBLE_DEVICES": "all"},
    }
    # What a request took before the events is the state it was judged on.
    assert taken == {
        "gpu-env": {"NVIDIA_VISIBLE_DEVICES": "all"},
        "suffix-only": {"DEVICES": "0,1"},
    }


def test_an_irrelevant_config_map_edit_changes_nothing(
    cache: LiveCache, server: FakeApiServer
) -> None:
    before = cache.facts_for("ml-team").config_maps
    server.put("configmaps", config_map("app-config", LOG_LEVEL="debug"))
    server.put("configmaps", config_map("gpu-env", NVIDIA_VISIBLE_DEVICES="all", LOG="info"))
    # One watch delivers events in order: once this one shows, the two above were applied.
    server.put("configmaps", config_map("marker", ns="team-b", NVIDIA_VISIBLE_DEVICES="void"))
    eventually(lambda: bool(cache.facts_for("team-b").config_maps))
    assert cache.facts_for("ml-team").config_maps is before  # not even copied


def test_a_huge_value_is_kept_cut_and_still_not_an_allowed_one(
    cache: LiveCache, server: FakeApiServer
) -> None:
    """Anyone who may create ConfigMaps must not be able to grow the cache by 1 MiB each."""
    server.put("configmaps", config_map("huge", NVIDIA_VISIBLE_DEVICES="void" + "," * 2**20))
    eventually(lambda: "huge" in cache.facts_for("ml-team").config_maps)  # type: ignore[operator]
    kept = cache.facts_for("ml-team").config_maps["huge"]["NVIDIA_VISIBLE_DEVICES"]  # type: ignore[index]
    assert len(kept) <= 300
    assert kept.startswith("void,") and kept not in ("void", "none", "")


def test_config_maps_are_listed_again_after_410_gone(
    cache: LiveCache, server: FakeApiServer
) -> None:
    # Changes whose events the server has forgotten: only a relist can show them.
    del server.objects["configmaps"][("ml-team", "gpu-env")]
    server.load("configmaps", [config_map("unseen", NVIDIA_VISIBLE_DEVICES="all")])
    server.compact()
    server.drop_watches()
    eventually(lambda: server.gone["configmaps"] >= 1)
    eventually(lambda: server.lists["configmaps"] >= 2)
    eventually(
        lambda: (
            cache.facts_for("ml-team").config_maps
            == {"unseen": {"NVIDIA_VISIBLE_DEVICES": "all"}, "suffix-only": {"DEVICES": "0,1"}}
        )
    )


def test_config_maps_are_unknown_until_listed(server: FakeApiServer) -> None:
    cfg = client.Configuration()
    cfg.host = server.url
    with client.ApiClient(cfg) as api:
        live = LiveCache(api)
        assert live.facts_for("ml-team").config_maps is None  # not "no such key": not known yet
        assert live.facts_for("ml-team").secrets is None
        live.list_once()  # the live audit's one-shot list reads them too
    assert live.facts_for("ml-team").config_maps == {
        "gpu-env": {"NVIDIA_VISIBLE_DEVICES": "all"},
        "suffix-only": {"DEVICES": "0,1"},
    }
    assert live.facts_for("ml-team").secrets is None  # never watched


def test_the_cluster_role_grants_every_watched_kind_and_no_secrets() -> None:
    granted = cluster_role_grants()
    groups = {"core": "", "scheduling": "scheduling.k8s.io"}
    for kind in KINDS:
        assert {"list", "watch"} <= granted.get((groups[kind.api], kind.name), set()), kind
    assert ("", "secrets") not in granted


# ---- a pod's effective request -----------------------------------------------------------


def _c(name: str, gpus: int = 0, *, sidecar: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def _pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> dict:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "ml-team"}, "spec": spec}


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        ([_c("a", 1), _c("b", 2)], None, 3),  # regular containers add up
        ([_c("a", 1)], [_c("side", 1, sidecar=True)], 2),  # a sidecar runs beside them: adds
        ([_c("a", 1)], [_c("init", 3), _c("side", 1, sidecar=True)], 3),  # max(3, 1 + 1)
        ([_c("a", 1)], [_c("side", 1, sidecar=True), _c("init", 2)], 3),  # init beside it: 1 + 2
        ([_c("a", 1)], [_c("init", 2), _c("init2", 1)], 2),  # ordinary init: the max
        ([_c("a")], [_c("side", 2, sidecar=True)], 2),  # GPUs only in a sidecar
    ],
)
def test_pod_summary_counts_as_the_scheduler_does(
    containers: list[dict[str, Any]], init: list[dict[str, Any]] | None, expected: int
) -> None:
    summary = pod_summary(_pod(containers, init), lambda _: "")
    assert summary is not None
    assert summary.gpus == {"nvidia.com/gpu": expected}


def test_a_pod_without_extended_resources_is_not_kept() -> None:
    assert pod_summary(_pod([_c("a")], [_c("side", sidecar=True), _c("init")]), str) is None


def test_sidecar_gpus_add_up_in_live_usage(cache: LiveCache, server: FakeApiServer) -> None:
    pod = gpu_pod("with-sidecar", gpus=1)
    pod["spec"]["initContainers"] = [_c("init", 2), _c("proxy", 1, sidecar=True)]
    server.put("pods", pod)  # max(2, 1 + 1) = 2
    eventually(lambda: used(cache) == 9)
    pod = gpu_pod("with-sidecar", gpus=1)
    pod["spec"]["initContainers"] = [_c("proxy", 1, sidecar=True), _c("init", 3)]
    server.put("pods", pod)  # the init container runs beside the sidecar: 1 + 3 = 4
    eventually(lambda: used(cache) == 11)


def test_a_kind_not_installed_costs_one_list_per_recheck_and_nothing_between(
    server: FakeApiServer,
) -> None:
    """A CRD the cluster does not serve is listed once, then waited on until the recheck: no
    retry with backoff, no watch, while the served kinds' watches run on."""
    from tests.support.fake_apiserver import PATHS
    from webhook.facts.watched import WATCHED

    absent = {name for name, row in WATCHED.items() if row.optional and name in PATHS}
    server.missing = set(absent)
    cfg = client.Configuration()
    cfg.host = server.url
    live = LiveCache(client.ApiClient(cfg), watch_timeout=5, max_backoff=0.2, recheck_seconds=300)
    live.start()
    try:
        assert live.wait_synced(10)
        eventually(lambda: all(server.lists[name] >= 1 for name in absent))
        time.sleep(1.5)  # several backoffs of 0.2 s: an error-path retry would list again
        assert {name: server.lists[name] for name in absent} == dict.fromkeys(absent, 1)
        assert not {kind for kind, _ in server.watches} & absent
        assert {kind for kind, _ in server.watches} >= {k.name for k in KINDS}
    finally:
        live.stop()
