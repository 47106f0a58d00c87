"""Provisionable GPU node shapes from the live list+watch (Karpenter NodePools and Cluster
API groups followed as they change), and which namespaces' objects may shape the cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.fake_apiserver import FakeApiServer
from tests.support.live import eventually, live_cache
from tests.support.provisioning import ANYWHERE, GPU_COUNT, PRODUCT, machine_group, node_pool, req
from webhook.facts.live import PROVISIONING_KINDS, LiveCache
from webhook.facts.provisioning import provisioning
from webhook.namepatterns import NamePatterns

# ---- the live cache --------------------------------------------------------------------------


@pytest.fixture
def cache(server: FakeApiServer) -> Iterator[LiveCache]:
    live = live_cache(server)
    live.start()
    assert live.wait_synced(10)
    yield live
    live.stop()


def products(live: LiveCache) -> list[str] | None:
    found = live.facts_for("ml-team").provisionable
    shapes = None if found is None else found.shapes(ANYWHERE)
    return None if shapes is None else sorted(s.labels.get(PRODUCT, "-") for s in shapes)


def test_live_lists_and_follows_nodepools_and_machine_groups(
    cache: LiveCache, server: FakeApiServer
) -> None:
    eventually(lambda: products(cache) == [])  # installed, nothing in them yet
    server.put(
        "nodepools", node_pool("h100", req(PRODUCT, "In", "H100"), req(GPU_COUNT, "In", "8"))
    )
    eventually(lambda: products(cache) == ["H100"])
    group = machine_group("l4", gpu_count="1", gpu_type="nvidia.com/gpu", labels=f"{PRODUCT}=L4")
    server.put("machinedeployments", group)
    eventually(lambda: products(cache) == ["H100", "L4"])
    taken = cache.facts_for("ml-team").provisionable
    server.put(
        "nodepools", node_pool("h100", req(PRODUCT, "In", "H200"), req(GPU_COUNT, "In", "8"))
    )
    eventually(lambda: products(cache) == ["H200", "L4"])
    server.delete("machinedeployments", "default", "l4")
    eventually(lambda: products(cache) == ["H200"])
    assert taken is not None
    assert sorted(s.labels[PRODUCT] for s in taken.shapes(ANYWHERE) or ()) == ["H100", "L4"]
    pool = machine_group(
        "a10", kind="MachinePool", gpu_count="1", gpu_type="nvidia.com/gpu", labels=f"{PRODUCT}=A10"
    )
    server.put("machinepools", pool)  # a MachinePool scales from zero the same way
    eventually(lambda: products(cache) == ["A10", "H200"])
    server.put("machinesets", machine_group("odd", kind="MachineSet", cpu="", memory=""))
    eventually(lambda: products(cache) is None)  # one group that cannot be told: unknown


def test_live_initial_list_reads_existing_objects(server: FakeApiServer) -> None:
    server.load("nodepools", [node_pool("a", req(PRODUCT, "In", "A100"))])
    server.load("machinesets", [machine_group("m", kind="MachineSet", ns="capi")])
    live = live_cache(server)
    live.list_once()
    assert products(live) == ["A100"]
    assert all(server.lists[k.name] == 1 for k in PROVISIONING_KINDS)


def test_crds_not_installed_are_known_empty_but_none_installed_is_unknown(
    server: FakeApiServer,
) -> None:
    server.missing = {"machinesets", "machinedeployments", "machinepools"}
    server.load("nodepools", [node_pool("a", req(PRODUCT, "In", "A100"))])
    live = live_cache(server)
    live.list_once()
    assert products(live) == ["A100"]  # Cluster API absent: Karpenter's pools are all
    server.missing.add("nodepools")
    live = live_cache(server)
    live.list_once()
    assert products(live) is None  # no autoscaler we can read: a pool at zero may come


def test_forbidden_kind_makes_provisioning_unknown_and_is_warned(
    server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.forbidden = {"nodepools"}
    live = live_cache(server)
    live.list_once()
    assert products(live) is None
    assert "nodepools: not allowed to list them (403)" in caplog.text


def test_a_crd_installed_later_is_found_by_the_recheck(server: FakeApiServer) -> None:
    server.missing = {"nodepools", "machinesets", "machinedeployments", "machinepools"}
    live = live_cache(server, recheck_seconds=0.2)
    live.start()
    try:
        assert live.wait_synced(10)  # absent CRDs do not hold up the core kinds
        eventually(lambda: server.lists["nodepools"] >= 1)
        assert products(live) is None
        server.missing = {"machinesets", "machinedeployments", "machinepools"}
        server.put("nodepools", node_pool("b", req(PRODUCT, "In", "B200")))
        eventually(lambda: products(live) == ["B200"])
    finally:
        live.stop()


# ---- which namespaces are read ---------------------------------------------------------------


def test_only_cluster_scoped_and_trusted_namespaces_shape_the_cluster() -> None:
    """A tenant may create a Cluster API object in its own namespace: it shapes nothing."""
    found = provisioning(
        [node_pool("h100", req(PRODUCT, "In", "H100"), req(GPU_COUNT, "In", "8"))],
        [],
        [
            machine_group("l4", ns="capi", gpu_count="1", gpu_type="nvidia.com/gpu"),
            machine_group("mine", ns="tenant-a", gpu_count="8", gpu_type="nvidia.com/gpu"),
            machine_group("odd", ns="tenant-b", cpu="", memory=""),  # cannot be told
        ],
    )
    assert found is not None
    trusted = found.shapes(NamePatterns(["capi"])) or ()
    assert sorted(s.name for s in trusted) == ["MachineDeployment l4", "NodePool h100"]
    assert found.shapes(NamePatterns([])) == found.shapes(NamePatterns(["default"]))
    assert [s.name for s in found.shapes(NamePatterns([])) or ()] == ["NodePool h100"]
    assert found.shapes(NamePatterns(["tenant-*"])) is None  # trusting the odd one: unknown
    assert found.ignored(NamePatterns(["capi"])) == ["tenant-a", "tenant-b"]
    assert provisioning(None, None, None) is None


def test_the_default_namespaces_are_exact_names_tenants_do_not_write() -> None:
    from webhook.namepatterns import is_pattern
    from webhook.ruleset.models import RuleSet

    names = RuleSet().cluster.provisioning_namespaces
    assert names == ["default", "kube-system"]
    assert not any(is_pattern(n) for n in names)


def test_live_keeps_each_object_under_its_namespace(server: FakeApiServer) -> None:
    server.load("machinedeployments", [machine_group("l4", ns="tenant-a", gpu_count="1")])
    live = live_cache(server)
    live.list_once()
    found = live.facts_for("ml-team").provisionable
    assert found is not None
    assert found.shapes(NamePatterns(["default", "kube-system"])) == ()
    assert found.ignored(NamePatterns(["default"])) == ["tenant-a"]


def test_rules_check_names_the_namespaces_whose_objects_it_leaves_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from webhook.cli import main

    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text("cluster: {provisioningNamespaces: [capi]}\n")
    snapshot = tmp_path / "cluster.yaml"
    groups = [machine_group("a", ns="capi"), machine_group("b", ns="tenant-a")]
    doc = {"apiVersion": "gpu-admission.io/v1", "kind": "ClusterSnapshot"}
    snapshot.write_text(yaml.safe_dump({**doc, "machineDeployments": groups}))
    assert main(["rules", "check", str(rules), "--cluster-snapshot", str(snapshot)]) == 0
    out = capsys.readouterr().out
    assert "warning: Cluster API objects in tenant-a are not read" in out
    assert "cluster.provisioningNamespaces (capi)" in out
