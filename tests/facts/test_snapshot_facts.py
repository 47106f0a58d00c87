"""The static snapshot's new facts: node taints, ConfigMaps and Secrets (known vs unknown)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT
from webhook.facts.model import NodeIndex
from webhook.facts.snapshotfile import (
    SnapshotError,
    SnapshotFile,
    StaticSnapshot,
    load_snapshot,
    snapshot_from_doc,
)


def snapshot(**sections: Any) -> StaticSnapshot:
    doc = {"apiVersion": "gpu-admission.io/v1", "kind": "ClusterSnapshot", **sections}
    return snapshot_from_doc(SnapshotFile.model_validate(doc))


def from_file(tmp_path: Path, **sections: Any) -> StaticSnapshot:
    path = tmp_path / "cluster.yaml"
    doc = {"apiVersion": "gpu-admission.io/v1", "kind": "ClusterSnapshot", **sections}
    path.write_text(yaml.safe_dump(doc))
    return load_snapshot(path)


# ---- ConfigMaps and Secrets -------------------------------------------------------------


def test_without_the_sections_both_kinds_are_unknown() -> None:
    facts = snapshot().facts_for("ml-team")
    assert facts.config_maps is None
    assert facts.secrets is None


def test_empty_sections_are_known_and_hold_nothing() -> None:
    facts = snapshot(configMaps=[], secrets=[]).facts_for("ml-team")
    assert facts.config_maps == {}
    assert facts.secrets == {}


def test_config_maps_keep_only_keys_that_could_become_nvidia_visible_devices() -> None:
    snap = snapshot(
        configMaps=[
            {
                "namespace": "ml-team",
                "name": "env",
                "data": {"NVIDIA_VISIBLE_DEVICES": "all", "LOG_LEVEL": "info", "DEVICES": "0"},
            },
            {"namespace": "ml-team", "name": "app", "data": {"NVIDIA_DRIVER": "x"}},
            {"namespace": "other", "name": "env", "data": {"VISIBLE_DEVICES": "void"}},
        ]
    )
    assert snap.facts_for("ml-team").config_maps == {
        "env": {"NVIDIA_VISIBLE_DEVICES": "all", "DEVICES": "0"}
    }  # "app" has no such key: absent, which reads as "no such key"
    assert snap.facts_for("other").config_maps == {"env": {"VISIBLE_DEVICES": "void"}}
    assert snap.facts_for("nowhere").config_maps == {}
    assert snap.facts_for("ml-team").secrets is None  # one section says nothing of the other


def test_secret_data_is_decoded_from_base64_and_string_data_wins() -> None:
    snap = snapshot(
        secrets=[
            {
                "namespace": "ml-team",
                "name": "gpu",
                "data": {
                    "NVIDIA_VISIBLE_DEVICES": "YWxs",  # "all"
                    "DEVICES": "MCwx",  # "0,1"
                    "TOKEN": "c2VjcmV0",
                },
                "stringData": {"DEVICES": "void"},
            },
            {"namespace": "ml-team", "name": "plain", "stringData": {"_DEVICES": "none"}},
        ]
    )
    assert snap.facts_for("ml-team").secrets == {
        "gpu": {"NVIDIA_VISIBLE_DEVICES": "all", "DEVICES": "void"},
        "plain": {"_DEVICES": "none"},
    }
    assert snap.facts_for("ml-team").config_maps is None


def test_a_secret_value_that_is_not_base64_names_its_field(tmp_path: Path) -> None:
    bad = {"namespace": "ml-team", "name": "gpu", "data": {"NVIDIA_VISIBLE_DEVICES": "all"}}
    with pytest.raises(SnapshotError, match=r"secrets\[0\]\.data\.NVIDIA_VISIBLE_DEVICES"):
        from_file(tmp_path, secrets=[bad])


def test_a_later_entry_of_the_same_name_replaces_the_earlier() -> None:
    snap = snapshot(
        configMaps=[
            {"namespace": "ns", "name": "env", "data": {"NVIDIA_VISIBLE_DEVICES": "all"}},
            {"namespace": "ns", "name": "env", "data": {"OTHER": "x"}},
        ]
    )
    assert snap.facts_for("ns").config_maps == {}


# ---- node taints ----------------------------------------------------------------------------


def test_node_taints_keep_no_schedule_and_no_execute_only(tmp_path: Path) -> None:
    snap = from_file(
        tmp_path,
        nodes=[
            {
                "name": "h100",
                "count": 2,
                "allocatable": {"nvidia.com/gpu": 8},
                "taints": [
                    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                    {"key": "spot", "effect": "PreferNoSchedule"},  # keeps no pod off
                    {"key": "dedicated", "effect": "NoExecute"},
                ],
            },
            {"name": "cpu", "allocatable": {}},
        ],
    )
    nodes = snap.facts_for("x").nodes
    expected = (("nvidia.com/gpu", "present", "NoSchedule"), ("dedicated", "", "NoExecute"))
    assert nodes.node("h100-0").taints == expected  # type: ignore[union-attr]
    assert nodes.node("h100-1").taints == expected  # type: ignore[union-attr]
    assert nodes.node("cpu").taints == ()  # type: ignore[union-attr]


def test_an_unknown_taint_effect_is_refused(tmp_path: Path) -> None:
    node = {"name": "n", "taints": [{"key": "k", "effect": "NoScheduel"}]}
    with pytest.raises(SnapshotError, match=r"nodes\.0\.taints\.0\.effect"):
        from_file(tmp_path, nodes=[node])


def test_the_example_snapshot_taints_its_gpu_nodes() -> None:
    facts = load_snapshot(ROOT / "examples" / "cluster-snapshot.yaml").facts_for("ml-team")
    gpu_nodes = [n for n in facts.nodes.nodes if n.gpus]
    assert gpu_nodes
    assert all(any(effect == "NoSchedule" for _, _, effect in n.taints) for n in gpu_nodes)


# ---- NodeIndex.node -----------------------------------------------------------------------


def test_node_lookup_by_name() -> None:
    index = NodeIndex(snapshot(nodes=[{"name": "a"}, {"name": "b"}]).facts_for("x").nodes.nodes)
    assert index.node("b") is index.nodes[1]
    assert index.node("c") is None
    assert NodeIndex().node("a") is None
