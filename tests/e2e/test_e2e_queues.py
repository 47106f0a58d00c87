"""Kueue and KAI queues on a real control plane: their CRDs installed (schemaless, Kueue served
as v1beta1 only, as an older Kueue serves it), queue objects created through the apiserver, and
the webhook's live cache acting on them at `kubectl apply`: a PyTorchJob naming a missing
LocalQueue, or asking more than its ClusterQueue can ever give, is refused with the queue and
the numbers; an unlabelled GPU Job gets the namespace's default LocalQueue, or is refused with
the queues it may use."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.e2e.support import Installed, apply, eventually, kubectl_error, post_review


def crd(group: str, plural: str, kind: str, version: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural, "kind": kind, "singular": kind.lower()},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


CRDS = [
    crd("kueue.x-k8s.io", "localqueues", "LocalQueue", "v1beta1", "Namespaced"),
    crd("kueue.x-k8s.io", "clusterqueues", "ClusterQueue", "v1beta1", "Cluster"),
    crd("kueue.x-k8s.io", "resourceflavors", "ResourceFlavor", "v1beta1", "Cluster"),
    crd("scheduling.run.ai", "queues", "Queue", "v2", "Cluster"),
    crd("kubeflow.org", "pytorchjobs", "PyTorchJob", "v1", "Namespaced"),
]
KUEUE = "kueue.x-k8s.io/v1beta1"


def queues(team: str, other: str) -> list[dict[str, Any]]:
    """Kueue's documented layout: a flavor per GPU product, a ClusterQueue in a cohort with
    nominal 8 + borrowing limit 8 of it, a LocalQueue per team namespace; a KAI leaf queue."""
    gpu = {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 8}
    return [
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": "e2e-h100"},
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "e2e-team-cq"},
            "spec": {
                "namespaceSelector": {},
                "cohort": "e2e",
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": "e2e-h100", "resources": [gpu]}],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": team},
            "spec": {"clusterQueue": "e2e-team-cq"},
        },
        *(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": other},
                "spec": {"clusterQueue": "e2e-team-cq"},
            }
            for name in ("training", "batch")
        ),
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "e2e-leaf"},
            "spec": {"resources": {"gpu": {"quota": 2, "limit": 4, "overQuotaWeight": 1}}},
        },
    ]


def pytorchjob(name: str, queue: str, workers: int, gpus: int) -> dict[str, Any]:
    def role(replicas: int) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "docker.io/kubeflowkatib/pytorch-mnist-cpu:v1beta1-21320b6",
            "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "16Gi"}},
        }
        return {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [container]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"pytorchReplicaSpecs": {"Master": role(1), "Worker": role(workers)}},
    }


def job(name: str) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
        "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "suspend": True,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


@pytest.fixture
def other(installed: Installed, namespace: str) -> Iterator[str]:
    name = f"{namespace[:40]}-b"
    installed.plane.kubectl("create", "namespace", name)
    yield name
    installed.plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def create(hook: Installed, obj: dict[str, Any], namespace: str) -> Any:
    return hook.plane.kubectl(
        "create", "-n", namespace, "-o", "json", "-f", "-", stdin=json.dumps(obj), check=False
    )


def test_the_live_cache_acts_on_queues_made_through_the_apiserver(
    installed: Installed, namespace: str, other: str
) -> None:
    plane = installed.plane
    apply(plane, CRDS)
    plane.kubectl(
        "wait", "--for=condition=Established", *(f"crd/{c['metadata']['name']}" for c in CRDS)
    )
    apply(plane, queues(namespace, other))
    # The cache looks for a CRD that was not installed every few minutes; a replica started
    # after Kueue was installed lists it at once.
    installed.stop()
    installed.start()
    try:
        installed.set_rules(yaml.safe_dump({"rules": {"gpu-queue": {"mode": "enforce"}}}))
        missing = pytorchjob("mnist-missing", "team-queue", workers=1, gpus=1)
        eventually(
            lambda: "team-queue" in post_review(installed, "validate", missing, namespace).message,
            what="the LocalQueues listed",
        )

        done = create(installed, missing, namespace)
        assert done.returncode != 0
        said = kubectl_error(done)
        print(f"\nPyTorchJob naming a missing LocalQueue:\n{said}")
        assert "LocalQueue team-queue, which does not exist" in said
        assert f"LocalQueues in {namespace}: default" in said

        big = pytorchjob("mnist-32", "default", workers=3, gpus=8)
        done = create(installed, big, namespace)
        assert done.returncode != 0
        said = kubectl_error(done)
        print(f"\nPyTorchJob asking 32 GPUs of a ClusterQueue giving 16:\n{said}")
        assert "ClusterQueue e2e-team-cq (of LocalQueue default) gives at most 16" in said
        assert "flavor e2e-h100: nominalQuota 8 + borrowingLimit 8" in said
        assert "= 32" in said

        done = create(installed, job("unlabelled"), namespace)
        assert done.returncode == 0, kubectl_error(done)
        stored = json.loads(done.stdout)
        print(f"\nunlabelled GPU Job stored with labels {stored['metadata'].get('labels')}")
        assert stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"

        done = create(installed, job("unlabelled"), other)
        assert done.returncode != 0
        said = kubectl_error(done)
        print(f"\nunlabelled GPU Job where no LocalQueue is the default:\n{said}")
        assert f"LocalQueues in {other}: batch, training" in said

        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kai-pod", "labels": {"kai.scheduler/queue": "e2e-nowhere"}},
            "spec": {
                "schedulerName": "kai-scheduler",
                "containers": [
                    {
                        "name": "main",
                        "image": "ubuntu",
                        "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}},
                    }
                ],
            },
        }
        done = create(installed, pod, namespace)
        assert done.returncode != 0
        assert "KAI queue e2e-nowhere, which does not exist" in kubectl_error(done)
        assert "e2e-leaf" in kubectl_error(done)
    finally:
        installed.set_rules("{}\n")
        # one kubectl for them all; each names its namespace where it has one
        plane.kubectl(
            "delete", "-f", "-", stdin=yaml.safe_dump_all(queues(namespace, other)), check=False
        )
