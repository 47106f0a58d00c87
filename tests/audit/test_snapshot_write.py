"""`gpu-admission snapshot` against an API server that speaks the real list protocol: the file
reads back as the facts the live audit reads, an audit against it agrees with `audit --cluster`,
the same cluster gives the same bytes, `--namespace` limits it, and Secrets are never read."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client

from tests.support.cluster import (
    cluster_queue,
    config_map,
    deployment,
    gpu_node,
    gpu_pod,
    local_queue,
    seed,
)
from tests.support.fake_apiserver import FakeApiServer
from tests.support.paths import ROOT
from webhook.cli import main
from webhook.facts.live import LiveCache
from webhook.facts.snapshotfile import load_snapshot
from webhook.facts.snapshotwrite import SECTIONS, _quantity
from webhook.quantity import parse_quantity


def research(server: FakeApiServer) -> None:
    """A second team: its own quota (scoped), a half-GPU pod, a ConfigMap that hides GPUs."""
    server.put("namespaces", {"metadata": {"name": "research", "labels": {"team": "r"}}})
    server.put(
        "resourcequotas",
        {
            "metadata": {"name": "gpu-high", "namespace": "research"},
            "spec": {
                "hard": {"requests.nvidia.com/gpu": "4"},
                "scopeSelector": {
                    "matchExpressions": [
                        {"scopeName": "PriorityClass", "operator": "In", "values": ["gpu-high"]}
                    ]
                },
            },
            "status": {"hard": {"requests.nvidia.com/gpu": "4"}, "used": {}},
        },
    )
    server.put("pods", gpu_pod("half", ns="research", gpus=1) | {"spec": {
        "nodeName": "h100-0", "priorityClassName": "gpu-high", "serviceAccountName": "trainer",
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu.shared": "500m"}}}],
    }})  # fmt: skip
    server.put("configmaps", config_map("hide", ns="research", NVIDIA_VISIBLE_DEVICES="void"))
    server.put("nodes", {**gpu_node(), "metadata": {"name": "a100-0", "labels": {}}})
    server.put(
        "deviceclasses",
        {"metadata": {"name": "gpu.nvidia.com", "uid": "u1", "resourceVersion": "9"}, "spec": {}},
    )


@pytest.fixture
def cluster(tmp_path: Path, server: FakeApiServer) -> Path:
    seed(server)
    research(server)
    for name, gpus in (("good", "1"), ("half", "0.5"), ("many", "12")):
        server.put("deployments", deployment(name, gpus))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(server.kubeconfig())
    return kubeconfig


def snapshot(kubeconfig: Path, out: Path, *extra: str) -> str:
    assert main(["snapshot", "--kubeconfig", str(kubeconfig), "--out", str(out), *extra]) == 0
    return out.read_text()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def findings(report: dict[str, Any]) -> dict[tuple[str, str], set[tuple[str, str, str]]]:
    assert report["errors"] == [] and report["notChecked"] == [], report
    return {
        (r["kind"], r["name"]): {(f["rule"], f["verdict"], f.get("message", "")) for f in
                                 r["findings"]}
        for r in report["results"]
    }  # fmt: skip


def test_an_audit_against_the_snapshot_agrees_with_the_live_audit(
    cluster: Path, server: FakeApiServer, tmp_path: Path
) -> None:
    file = tmp_path / "cluster.yaml"
    snapshot(cluster, file)
    rules = ("--rules", str(ROOT / "rules"))
    live = run("audit", "--cluster", "--kubeconfig", str(cluster), *rules, "-o", "json")
    manifests = tmp_path / "deployments.yaml"
    # what the live audit judges: the Deployments, and the pods no controller owns
    stored = [
        {"apiVersion": "apps/v1", "kind": "Deployment", **obj}
        for obj in server.objects["deployments"].values()
    ] + [{"apiVersion": "v1", "kind": "Pod", **obj} for obj in server.objects["pods"].values()]
    manifests.write_text(yaml.safe_dump_all(stored))
    offline = run(
        "audit", "--cluster-snapshot", str(file), *rules, "-o", "json", str(manifests)
    )  # fmt: skip

    assert offline.returncode == live.returncode == 1, (live.stderr, offline.stderr)
    got, want = findings(json.loads(offline.stdout)), findings(json.loads(live.stdout))
    assert got == want and len(got) == 3 + 9
    # the facts decided: 24 GPUs do not fit the quota of 16 with 7 used; no node has 12
    many = {(r, v) for r, v, _ in got[("Deployment", "many")]}
    assert {("gpu-quota", "warn"), ("gpu-schedulable", "deny")} <= many


def test_the_file_reads_back_as_the_facts_the_live_cache_lists(
    cluster: Path, tmp_path: Path, server: FakeApiServer
) -> None:
    snapshot(cluster, tmp_path / "c.yaml")
    facts = load_snapshot(tmp_path / "c.yaml")
    cfg = client.Configuration()
    cfg.host = server.url
    with client.ApiClient(cfg) as api:
        live = LiveCache(api)
        live.list_once()
    for ns in ("ml-team", "research", "default", "nowhere"):
        a, b = facts.facts_for(ns), live.facts_for(ns)
        assert a.namespace_labels == b.namespace_labels
        assert sorted(a.quotas, key=lambda q: q.name) == sorted(b.quotas, key=lambda q: q.name)
        assert a.usage.by_resource == b.usage.by_resource
        assert a.usage.by_product == b.usage.by_product
        assert a.config_maps == b.config_maps
        assert a.secrets is None and b.secrets is None  # unknown in both: never read
        assert dict(a.priority_classes) == dict(b.priority_classes)
    assert sorted(facts.node_index().nodes, key=lambda n: n.name) == sorted(
        live.node_index().nodes, key=lambda n: n.name
    )
    half = facts.facts_for("research").usage.by_resource
    assert half == {"nvidia.com/gpu.shared": Fraction(1, 2)}


def test_the_same_cluster_gives_the_same_bytes_whatever_the_order_it_lists(
    tmp_path: Path, cluster: Path, server: FakeApiServer
) -> None:
    first = snapshot(cluster, tmp_path / "1.yaml")
    other = FakeApiServer()  # the same objects, put in the reverse order
    other.start()
    try:
        for kind, objects in server.objects.items():
            for obj in reversed(list(objects.values())):
                other.put(kind, obj)
        kubeconfig = tmp_path / "other"
        kubeconfig.write_text(other.kubeconfig())
        assert snapshot(kubeconfig, tmp_path / "2.yaml") == first
    finally:
        other.stop()
    assert snapshot(cluster, tmp_path / "3.yaml") == first
    doc = yaml.safe_load(first)
    assert list(doc)[:4] == ["apiVersion", "kind", "namespaces", "nodes"]
    keys = [(p["namespace"], p["name"]) for p in doc["pods"]]
    assert keys == sorted(keys) and len(keys) == 9
    assert "resourceVersion" not in first and "uid" not in first


def test_namespace_limits_the_namespaced_facts_only(tmp_path: Path, cluster: Path) -> None:
    doc = yaml.safe_load(snapshot(cluster, tmp_path / "r.yaml", "--namespace", "research"))
    assert list(doc["namespaces"]) == ["research"]
    # who runs where is known only from the whole cluster: here the GPU pods, no accounts
    assert [(p["name"], "serviceAccount" in p) for p in doc["pods"]] == [("half", False)]
    assert load_snapshot(tmp_path / "r.yaml").census is None
    snapshot(cluster, tmp_path / "w.yaml")
    whole = load_snapshot(tmp_path / "w.yaml")
    assert whole.census is not None and ("trainer", "half") in whole.census.pods["research"]
    assert ("default", "web") in whole.census.pods["ml-team"]  # a pod of no GPU counts too
    assert {p["namespace"] for p in doc["pods"]} == {"research"}
    assert [q["name"] for q in doc["resourceQuotas"]] == ["gpu-high"]
    assert [c["name"] for c in doc["configMaps"]] == ["hide"]
    assert [n["name"] for n in doc["nodes"]] == ["a100-0", "h100-0"]  # the whole cluster's
    assert [p["name"] for p in doc["priorityClasses"]] == ["gpu-high"]
    both = yaml.safe_load(snapshot(cluster, tmp_path / "b.yaml", "--namespace", "research",
                                   "--namespace", "ml-team"))  # fmt: skip
    assert list(both["namespaces"]) == ["ml-team", "research"]


def test_secrets_are_never_read(
    tmp_path: Path, cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the snapshot read Secrets")

    for name in (
        "list_secret_for_all_namespaces",
        "list_namespaced_secret",
        "read_namespaced_secret",
    ):
        monkeypatch.setattr(client.CoreV1Api, name, refuse)
    doc = yaml.safe_load(snapshot(cluster, tmp_path / "s.yaml"))
    assert "secrets" not in doc  # left out: unknown, as the live cache has it


def test_what_the_cluster_does_not_serve_or_show_is_left_as_unknown(
    tmp_path: Path, cluster: Path, server: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.forbidden |= {"configmaps", "machinesets", "resourceclaims", "servingruntimes"}
    server.missing |= {"nodepools", "deviceclasses"}
    doc = yaml.safe_load(snapshot(cluster, tmp_path / "u.yaml"))
    # 403: unknown (left out); an autoscaler or KServe kind takes its group along
    for key in ("configMaps", "resourceClaims", "servingRuntimes", "clusterServingRuntimes"):
        assert key not in doc, key
    for key in ("nodePools", "machineSets", "machineDeployments", "machinePools"):
        assert key not in doc, key
    # 404 on a DRA kind: known, and none
    assert doc["deviceClasses"] == [] and doc["resourceClaimTemplates"] == []
    assert "configMaps: not allowed to list them (403)" in capsys.readouterr().err
    facts = load_snapshot(tmp_path / "u.yaml").facts_for("ml-team")
    assert facts.config_maps is None and facts.provisionable is None


def test_a_core_kind_it_may_not_list_is_an_error_naming_it(
    tmp_path: Path, cluster: Path, server: FakeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server.forbidden.add("pods")
    out = tmp_path / "none.yaml"
    assert main(["snapshot", "--kubeconfig", str(cluster), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot list pods: 403" in err and "forbidden" in err
    assert not out.exists()


def test_each_section_is_one_row_and_a_key_the_reader_knows() -> None:
    from webhook.facts.snapshotfile import SnapshotFile

    keys = [s.key for s in SECTIONS]
    assert len(keys) == len(set(keys))
    known = {f.alias or n for n, f in SnapshotFile.model_fields.items()}
    assert set(keys) <= known
    # every section the reader takes is written, but Secrets (never read)
    assert known - set(keys) == {"apiVersion", "kind", "namespaces", "secrets"}


@given(st.integers(0, 10**6), st.integers(1, 10**9))
def test_a_quantity_is_written_as_one_that_reads_back_the_same(whole: int, nano: int) -> None:
    value = parse_quantity(f"{whole}.{nano:09d}") if nano % 10**9 else parse_quantity(whole)
    assert parse_quantity(_quantity(value)) == value


def test_queues_are_written_whole_and_read_back_as_the_live_cache_reads_them(
    tmp_path: Path, cluster: Path, server: FakeApiServer
) -> None:
    server.put("localqueues", local_queue("user-queue", "team-a-cq"))
    server.put("localqueues", local_queue("other", "team-b-cq", ns="research"))
    server.put("clusterqueues", cluster_queue("team-a-cq", 8, 8))
    kai = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"}}
    server.put("queues", kai)
    doc = yaml.safe_load(snapshot(cluster, tmp_path / "q.yaml"))
    # sorted by namespace, then name
    assert [q["metadata"]["name"] for q in doc["localQueues"]] == ["user-queue", "other"]
    assert doc["clusterQueues"][0]["spec"] == cluster_queue("team-a-cq", 8, 8)["spec"]
    assert doc["resourceFlavors"] == []  # served, none: known and empty
    assert [q["metadata"]["name"] for q in doc["queues"]] == ["q"]
    facts = load_snapshot(tmp_path / "q.yaml")
    cfg = client.Configuration()
    cfg.host = server.url
    with client.ApiClient(cfg) as api:
        live = LiveCache(api)
        live.list_once()
    for ns in ("ml-team", "research"):
        a, b = facts.facts_for(ns).queues, live.facts_for(ns).queues
        assert a is not None and b is not None
        assert a.local_queues == b.local_queues
        assert a.kai_leaves() == b.kai_leaves() == ["q"]
    # only the namespaces asked for: LocalQueues are namespaced, ClusterQueues are not
    doc = yaml.safe_load(snapshot(cluster, tmp_path / "r.yaml", "--namespace", "research"))
    assert [q["metadata"]["name"] for q in doc["localQueues"]] == ["other"]
    assert [q["metadata"]["name"] for q in doc["clusterQueues"]] == ["team-a-cq"]


def test_queue_sections_are_known_together_or_not_at_all(
    tmp_path: Path, cluster: Path, server: FakeApiServer
) -> None:
    """Kueue not installed: each section known and empty. One queue kind forbidden: all four
    left out, since the reader takes a missing section beside given ones as empty."""
    server.missing.update({"localqueues", "clusterqueues", "resourceflavors", "queues"})
    doc = yaml.safe_load(snapshot(cluster, tmp_path / "none.yaml"))
    assert all(doc[k] == [] for k in ("localQueues", "clusterQueues", "resourceFlavors", "queues"))
    server.missing.clear()
    server.forbidden.add("clusterqueues")
    doc = yaml.safe_load(snapshot(cluster, tmp_path / "forbidden.yaml"))
    assert not {"localQueues", "clusterQueues", "resourceFlavors", "queues"} & set(doc)
    assert load_snapshot(tmp_path / "forbidden.yaml").facts_for("ml-team").queues is None
