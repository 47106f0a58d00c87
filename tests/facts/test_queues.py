"""Kueue's and KAI's queues as facts: each object reduced to what gpu-queue reads, in either
Kueue version, kept per kind with "not installed" (known, none) apart from "not readable"."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.paths import ROOT
from webhook.facts import queues
from webhook.facts.queues import QueueStore, cluster_queue, kai_queue, reduce
from webhook.facts.snapshotfile import SnapshotError, load_snapshot

GOLDEN_CLUSTER = ROOT / "tests" / "golden" / "queue-kueue-pytorchjob-over-clusterqueue-denied"


def cq(version: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a-cq"},
        "spec": spec,
    }


GPU_GROUP = {
    "coveredResources": ["nvidia.com/gpu"],
    "flavors": [
        {
            "name": "h100",
            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8", "borrowingLimit": 4}],
        },
        {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]},
    ],
}


def test_a_cluster_queue_reads_the_same_in_both_versions() -> None:
    """v1beta2 renamed `cohort` to `cohortName`; the quotas are Kubernetes quantities."""
    old = cluster_queue(
        cq("v1beta1", cohort="ab", namespaceSelector={}, resourceGroups=[GPU_GROUP])
    )
    new = cluster_queue(
        cq("v1beta2", cohortName="ab", namespaceSelector={}, resourceGroups=[GPU_GROUP])
    )
    assert old == new
    assert new.cohort == "ab"
    assert new.covers("nvidia.com/gpu") and not new.covers("amd.com/gpu")
    h100, a100 = new.groups[0].flavors
    assert h100.nominal == {"nvidia.com/gpu": 8} and h100.borrowing == {"nvidia.com/gpu": 4}
    assert a100.borrowing == {"nvidia.com/gpu": None}  # no limit: borrows what the cohort lends


def test_a_cluster_queue_without_namespace_selector_admits_no_namespace() -> None:
    """Kueue: a null namespaceSelector is a nothing selector; `{}` selects every namespace."""
    assert not cluster_queue(cq("v1beta2")).admits_namespace({"team": "ml"})
    assert cluster_queue(cq("v1beta2", namespaceSelector={})).admits_namespace({})
    picky = cluster_queue(
        cq(
            "v1beta2",
            namespaceSelector={
                "matchLabels": {"team": "ml"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["free"]}],
            },
        )
    )
    assert picky.admits_namespace({"team": "ml"})
    assert not picky.admits_namespace({"team": "ml", "tier": "free"})
    assert not picky.admits_namespace({"team": "research"})


def test_a_kai_queue_keeps_its_parent_and_gpu_quota_and_limit() -> None:
    q = kai_queue(
        {
            "metadata": {"name": "research-team-a"},
            "spec": {
                "parentQueue": "research-team",
                "resources": {"gpu": {"quota": 2, "limit": 0.5, "overQuotaWeight": 1}},
            },
        }
    )
    assert (q.parent, q.gpu_quota, q.gpu_limit) == ("research-team", 2.0, 0.5)


def _kai(name: str, parent: str = "", limit: float = -1) -> tuple[str, str, Any]:
    return reduce(
        queues.KAI,
        {
            "metadata": {"name": name},
            "spec": {"parentQueue": parent, "resources": {"gpu": {"limit": limit}}},
        },
    )


def test_kai_leaves_and_the_limits_above_a_queue() -> None:
    store = QueueStore()
    store.replace(
        queues.KAI,
        [_kai("root", limit=16), _kai("team", "root", limit=-1), _kai("team-a", "team", limit=4)],
    )
    facts = store.facts_for("any")
    assert facts is not None
    assert facts.kai_leaves() == ["team-a"]
    assert facts.kai_limits("team-a") == [("team-a", 4.0), ("root", 16.0)]
    assert facts.kai_limits("team") == [("root", 16.0)]


def test_nothing_listed_is_unknown_and_not_installed_is_known_empty() -> None:
    store = QueueStore()
    assert store.facts_for("ml-team") is None
    for kind in queues.KINDS:
        store.not_served(kind, 404)
    facts = store.facts_for("ml-team")
    assert facts is not None
    assert (facts.local_queues, facts.cluster_queues, facts.kai_queues) == ({}, {}, {})


def test_the_older_kueue_version_is_read_where_the_newer_is_not_served() -> None:
    store = QueueStore()
    for plural in queues.KUEUE_PLURALS:
        store.not_served(plural, 404)  # v1beta2 not served: an older Kueue
    assert store.facts_for("ml-team") is None  # v1beta1 not listed yet: still unknown
    lq = {
        "metadata": {"namespace": "ml-team", "name": "user-queue"},
        "spec": {"clusterQueue": "cq"},
    }
    store.replace("localqueues.v1beta1", [reduce("localqueues.v1beta1", lq)])
    facts = store.facts_for("ml-team")
    assert facts is not None and facts.local_queues == {"user-queue": "cq"}
    assert store.facts_for("other") is not None
    assert store.facts_for("other").local_queues == {}  # type: ignore[union-attr]


def test_a_forbidden_kind_is_unknown() -> None:
    store = QueueStore()
    store.replace(queues.KAI, [_kai("default-queue")])
    store.not_served(queues.LOCAL, 403)
    facts = store.facts_for("ml-team")
    assert facts is not None and facts.local_queues is None and facts.kai_queues is not None


def test_snapshot_sections_hold_the_objects_whole() -> None:
    snap = load_snapshot(GOLDEN_CLUSTER / "cluster.yaml")
    facts = snap.facts_for("ml-team").queues
    assert facts is not None and facts.local_queues is not None
    assert facts.local_queues["user-queue"] == "team-a-cq"
    assert facts.flavors is not None
    assert facts.flavors["h100"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert facts.kai_leaves() == ["default-queue", "research-team-a"]


def test_a_snapshot_without_queue_sections_leaves_them_unknown(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("apiVersion: gpu-admission.io/v1\nkind: ClusterSnapshot\n")
    assert load_snapshot(path).facts_for("ml-team").queues is None
    path.write_text("apiVersion: gpu-admission.io/v1\nkind: ClusterSnapshot\nqueues: []\n")
    facts = load_snapshot(path).facts_for("ml-team").queues
    assert facts is not None and facts.local_queues == {} and facts.kai_queues == {}


@pytest.mark.parametrize(
    ("section", "obj", "field"),
    [
        ("localQueues", {"metadata": {"name": "q"}}, "localQueues[0].metadata.namespace"),
        ("clusterQueues", {"spec": {}}, "clusterQueues[0].metadata.name"),
        ("queues", {"metadata": "x"}, "queues[0].metadata.name"),
    ],
)
def test_a_queue_without_its_name_is_refused_naming_the_field(
    tmp_path: Path, section: str, obj: dict[str, Any], field: str
) -> None:
    import yaml

    path = tmp_path / "c.yaml"
    doc = {"apiVersion": "gpu-admission.io/v1", "kind": "ClusterSnapshot", section: [obj]}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SnapshotError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_snapshot(path)


_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6)
_key = st.sampled_from(
    ["name", "namespace", "resources", "nominalQuota", "borrowingLimit", "cohort", "cohortName",
     "namespaceSelector", "matchLabels", "matchExpressions", "key", "operator", "values",
     "clusterQueue", "nodeLabels", "parentQueue", "gpu", "limit", "quota", "flavors",
     "coveredResources", "resourceGroups"]
)  # fmt: skip
# Objects shaped like the queue kinds' (the keys they read), any value anywhere.
_value = st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_key, inner, max_size=4),
    max_leaves=12,
)
_object = st.fixed_dictionaries(
    {}, optional={"metadata": st.dictionaries(_key, _value, max_size=3), "spec": _value}
)


@given(kind=st.sampled_from(queues.KINDS), obj=_object)
def test_any_object_reduces_without_crashing(kind: str, obj: dict[str, Any]) -> None:
    """Fields of a wrong type read as absent: a forged object never breaks the cache."""
    namespace, name, value = reduce(kind, obj)
    assert isinstance(namespace, str) and isinstance(name, str)
    store = QueueStore()
    store.replace(kind, [(namespace, name, value)])
    facts = store.facts_for(namespace)
    if facts is not None and facts.cluster_queues:
        for q in facts.cluster_queues.values():
            for group in q.groups:
                for flavor in group.flavors:
                    assert all(isinstance(v, int | Fraction) for v in flavor.nominal.values())
            q.admits_namespace({"a": "b"})
    if facts is not None:
        for leaf in facts.kai_leaves():
            facts.kai_limits(leaf)


def test_rules_explain_says_a_queue_keeps_the_gpus_where_gpu_queue_is_on(tmp_path: Path) -> None:
    import io

    from webhook.rulecli.commands import explain

    (tmp_path / "rules.yaml").write_text(
        'rules:\n  gpu-queue: {mode: "off"}\n'
        "overrides:\n  - name: batch\n    namespaces: [ml-team]\n"
        "    rules: {gpu-queue: {mode: enforce, defaultQueue: user-queue}}\n"
    )
    out = io.StringIO()
    explain(tmp_path, "ml-team", {}, out)
    said = out.getvalue()
    assert "queue: gpu-queue (enforce): GPU workloads here go through a batch queue" in said
    assert "labelled with LocalQueue 'user-queue'" in said
    out = io.StringIO()
    explain(tmp_path, "inference", {}, out)
    assert "queue: gpu-queue" not in out.getvalue()  # off there: budgets and quotas keep it
