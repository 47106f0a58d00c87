"""Pods the tests of several topics send: a GPU pod with every finding the default rules warn of,
pods asking for GPUs over the example cluster.
"""

from __future__ import annotations

from typing import Any

VIOLATION = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "trainer", "labels": {"app": "trainer"}},
    "spec": {
        "serviceAccountName": "trainer",
        "containers": [
            {
                "name": "t",
                "image": "cuda",
                "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}},
                "readinessProbe": {"tcpSocket": {"port": 80}},
                "securityContext": {"privileged": True},
            }
        ],
    },
}


def pod(gpus: int | str = 1, resource: str = "nvidia.com/gpu", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "job-"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "resources": {"limits": {resource: str(gpus), "memory": "64Gi"}},
                    "readinessProbe": {"tcpSocket": {"port": 80}},
                }
            ],
            **spec,
        },
    }
