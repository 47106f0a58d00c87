"""Cluster objects as an API server holds them, and a fake API server seeded with them: what the
live cache, the live audit and the snapshot writer read.
"""

from __future__ import annotations

from typing import Any

from tests.support.fake_apiserver import FakeApiServer


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
    server.put("nodes", gpu_node())
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
    server.put("configmaps", config_map("gpu-env", NVIDIA_VISIBLE_DEVICES="all", LOG="debug"))
    server.put("configmaps", config_map("suffix-only", DEVICES="0,1"))  # prefix NVIDIA_VISIBLE_
    server.put("configmaps", config_map("app-config", LOG_LEVEL="info", NVIDIA_DRIVER="x"))


TAINTS = [
    {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "ml", "effect": "NoExecute"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},  # keeps no pod off
]


def gpu_node(taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "h100-0", "labels": {"nvidia.com/gpu.product": "H100"}},
        "spec": {"taints": TAINTS if taints is None else taints},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"}},
    }


def config_map(name: str, ns: str = "ml-team", **data: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "data": data}


def deployment(name: str, gpus: str, ns: str = "ml-team") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "vllm",
                            "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "8Gi"}},
                            "readinessProbe": {"tcpSocket": {"port": 80}},
                        }
                    ]
                },
            },
        },
    }


def local_queue(name: str, target: str, ns: str = "ml-team") -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"namespace": ns, "name": name},
        "spec": {"clusterQueue": target},
    }


def cluster_queue(name: str, nominal: int, borrowing: int | None = None) -> dict[str, Any]:
    quota: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    if borrowing is not None:
        quota["borrowingLimit"] = borrowing
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "cohortName": "all",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "gpu", "resources": [quota]}],
                }
            ],
        },
    }
