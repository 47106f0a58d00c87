"""Karpenter NodePools and Cluster API groups that can bring GPU nodes, built for the provisioning
tests (parsed, from a snapshot, from the live watch).
"""

from __future__ import annotations

from typing import Any

from webhook.namepatterns import NamePatterns

ANYWHERE = NamePatterns(["*"])  # every namespace trusted: what the objects offer at all

PRODUCT = "nvidia.com/gpu.product"

GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"


def req(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def node_pool(
    name: str = "gpu",
    *reqs: dict[str, Any],
    labels: dict[str, str] | None = None,
    limits: dict[str, Any] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": labels or {}},
            "spec": {"requirements": list(reqs), "nodeClassRef": {"name": "default"}},
        }
    }
    if taints is not None:
        spec["template"]["spec"]["taints"] = taints
    if limits is not None:
        spec["limits"] = limits
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": spec,
    }


def machine_group(
    name: str = "gpu-md", kind: str = "MachineDeployment", ns: str = "default", **notes: str
) -> dict[str, Any]:
    annotations = {
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "0",
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5",
        "capacity.cluster-autoscaler.kubernetes.io/cpu": "48",
        "capacity.cluster-autoscaler.kubernetes.io/memory": "192G",
    }
    for key, value in notes.items():
        full = (
            key
            if "/" in key
            else "capacity.cluster-autoscaler.kubernetes.io/" + key.replace("_", "-")
        )
        if value == "":
            annotations.pop(full, None)
        else:
            annotations[full] = value
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"replicas": 0, "template": {"metadata": {}, "spec": {}}},
    }
