"""A pod that fills every node it can run on may run privileged containers that ask for no GPU;
anything that leaves a node's GPUs to other tenants keeps the denial (golden cases
`whole-node-pod-*` show whole objects)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import GOLDEN
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import evaluate
from webhook.engine.subject import subject_for
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules

CASE = GOLDEN / "whole-node-pod-privileged-sidecar-allowed"
POD = yaml.safe_load((CASE / "input.yaml").read_text())
CLUSTER = yaml.safe_load((CASE / "cluster.yaml").read_text())


def _decide(tmp_path: Path, pod: dict[str, Any], cluster: dict[str, Any]) -> Any:
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir(exist_ok=True)
    shutil.copy(CASE / "rules.yaml", rules_dir / "rules.yaml")
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    facts = load_snapshot(tmp_path / "cluster.yaml").facts_for("ml-team")
    rules = compile_rules(load_rules(rules_dir))
    return evaluate(subject_for(pod, namespace="ml-team"), rules, facts)


def test_filling_every_node_admits_the_privileged_sidecar(tmp_path: Path) -> None:
    assert _decide(tmp_path, copy.deepcopy(POD), CLUSTER).allowed


def test_a_cordoned_node_of_more_gpus_still_counts(tmp_path: Path) -> None:
    """A cordon is lifted later, and a DaemonSet's pods run on cordoned nodes anyway."""
    cluster = copy.deepcopy(CLUSTER)
    cluster["nodes"].append(
        {
            "name": "big",
            "unschedulable": True,
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "allocatable": {"nvidia.com/gpu": "16"},
        }
    )
    decision = _decide(tmp_path, copy.deepcopy(POD), cluster)
    assert not decision.allowed
    assert "has 16 nvidia.com/gpu, the pod asks 8" in decision.message()


def test_a_pod_that_names_its_node_keeps_the_denial(tmp_path: Path) -> None:
    pod = copy.deepcopy(POD)
    pod["spec"]["nodeName"] = "a3-highgpu-8g-0"
    decision = _decide(tmp_path, pod, CLUSTER)
    assert not decision.allowed and "it names its node (nodeName)" in decision.message()


# ---- GPUs served through DRA, and provisioning that counts as known -----------------------

DRA_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
        "extendedResourceName": "nvidia.com/gpu",
    },
}


def _slice(node: str, gpus: int, driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(gpus)],
        },
    }


def _dra_node(name: str) -> dict[str, Any]:
    """A node whose GPUs DRA serves: none in its allocatable."""
    return {
        "name": name,
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    }


def test_a_dra_node_of_more_gpus_than_the_pod_asks_keeps_the_denial(tmp_path: Path) -> None:
    """A DeviceClass serves nvidia.com/gpu through extendedResourceName on a 16-GPU DRA node:
    an 8-GPU pod can land there beside another tenant's 8."""
    cluster = copy.deepcopy(CLUSTER)
    cluster["nodes"].append(_dra_node("dra-16"))
    cluster["deviceClasses"] = [DRA_CLASS]
    cluster["resourceSlices"] = [_slice("dra-16", 16)]
    decision = _decide(tmp_path, copy.deepcopy(POD), cluster)
    assert not decision.allowed
    assert "has 16 GPUs served through DRA (gpu.nvidia.com), the pod asks 8" in decision.message()


def test_dra_gpus_beside_a_device_plugins_keep_the_denial(tmp_path: Path) -> None:
    """Another tenant can claim the DRA GPUs of a node whose device-plugin GPUs the pod fills."""
    cluster = copy.deepcopy(CLUSTER)
    cluster["deviceClasses"] = []
    cluster["resourceSlices"] = [_slice("a2-ultragpu-8g", 2, "gpu.amd.com")]
    decision = _decide(tmp_path, copy.deepcopy(POD), cluster)
    assert not decision.allowed
    assert "served through DRA (gpu.amd.com)" in decision.message()


def test_dra_devices_that_are_no_gpus_do_not_count(tmp_path: Path) -> None:
    cluster = copy.deepcopy(CLUSTER)
    cluster["deviceClasses"] = []
    cluster["resourceSlices"] = [_slice("a2-ultragpu-8g", 4, "rdma.example.com")]
    assert _decide(tmp_path, copy.deepcopy(POD), cluster).allowed


def test_unknown_resource_slices_keep_the_denial(tmp_path: Path) -> None:
    """Which GPUs DRA drivers publish on each node only ResourceSlices say."""
    cluster = copy.deepcopy(CLUSTER)
    del cluster["resourceSlices"]
    decision = _decide(tmp_path, copy.deepcopy(POD), cluster)
    assert not decision.allowed
    assert "ResourceSlices" in decision.message()


def test_a_shape_seen_in_the_cluster_does_not_make_provisioning_known(tmp_path: Path) -> None:
    """A Karpenter NodePool of 8-GPU nodes says nothing of a managed pool at zero of 16."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "rules.yaml").write_text("rules: {}\n")  # autoscaling: unknown
    cluster = copy.deepcopy(CLUSTER)
    cluster["nodePools"] = [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "h100"},
            "spec": {
                "template": {
                    "metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
                    "spec": {
                        "requirements": [
                            {
                                "key": "karpenter.k8s.aws/instance-gpu-count",
                                "operator": "In",
                                "values": ["8"],
                            },
                            {
                                "key": "karpenter.k8s.aws/instance-gpu-manufacturer",
                                "operator": "In",
                                "values": ["nvidia"],
                            },
                        ],
                        "nodeClassRef": {"group": "x", "kind": "y", "name": "z"},
                    },
                }
            },
        }
    ]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    facts = load_snapshot(tmp_path / "cluster.yaml").facts_for("ml-team")
    rules = compile_rules(load_rules(rules_dir))
    decision = evaluate(subject_for(copy.deepcopy(POD), namespace="ml-team"), rules, facts)
    assert not decision.allowed
    assert "provisioning not declared" in decision.message()
