"""A webhook budget on a real control plane, as queues and sharing schedulers use it: pods given
half a GPU by KAI Scheduler's annotation fill a budget of 4 eight at a time, counted by the live
cache from what the watch shows (no hold left in force), and a job Kueue creates suspended takes
nothing of the budget until the update that releases it, which is judged then."""

from __future__ import annotations

import json
from typing import Any

import yaml

from tests.e2e.support import Installed, eventually, gpu_pod, kube_json


def _budget(namespace: str, gpus: int) -> str:
    return yaml.safe_dump(
        {
            "rules": {
                "gpu-quota": {
                    "budgets": [
                        {
                            "name": "e2e-team",
                            "namespaces": [namespace],
                            "limits": {"nvidia.com/gpu": gpus},
                        }
                    ]
                }
            }
        }
    )


def half_gpu_pod(name: str) -> dict[str, Any]:
    """KAI Scheduler's own GPU-sharing example: half a GPU by annotation, no GPU resource."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"runai/queue": "test"},
            "annotations": {"gpu-fraction": "0.5"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [
                {
                    "name": "sleep",
                    "image": "busybox",
                    "args": ["sh", "-c", "sleep infinity"],
                    "resources": {"limits": {"memory": "1Gi"}},
                    "readinessProbe": {"exec": {"command": ["true"]}},
                }
            ],
        },
    }


def test_eight_half_gpu_pods_fill_a_budget_of_4_and_the_ninth_is_refused(
    installed: Installed, namespace: str
) -> None:
    plane = installed.plane
    installed.set_rules(_budget(namespace, 4))
    for i in range(8):
        created = plane.kubectl(
            "create", "-n", namespace, "-f", "-", stdin=json.dumps(half_gpu_pod(f"nb-{i}"))
        )
        assert "gpu-quota" not in created.stderr, created.stderr
    # Every hold has ended: the watch has shown the eight pods, and the cache counts their
    # halves. The ninth is refused from what the cluster holds, not from this replica's memory.
    eventually(lambda: installed.metric("gpu_admission_gpu_holds") == 0, what="holds ended")
    refused = plane.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=json.dumps(half_gpu_pod("nb-8")), check=False
    )
    assert refused.returncode != 0
    assert 'admission webhook "validate.gpu-admission.io" denied' in refused.stderr
    assert (
        f"gpu-quota: namespace {namespace} uses 4 of 4 nvidia.com/gpu; this pod asks 0.5"
        in refused.stderr
    ), refused.stderr
    # One of the eight gone, its half is free again.
    plane.kubectl("delete", "pod", "nb-0", "-n", namespace, "--grace-period=0", "--force")
    eventually(
        lambda: (
            plane.kubectl(
                "create",
                "-n",
                namespace,
                "-f",
                "-",
                stdin=json.dumps(half_gpu_pod("nb-8")),
                check=False,
            ).returncode
            == 0
        ),
        what="the ninth admitted once one of the eight is gone",
    )


def kueue_job(name: str, gpus_each: int, pods: int) -> dict[str, Any]:
    """Kueue's sample Job, asking GPUs: created suspended, as Kueue's webhook leaves it."""
    spec = gpu_pod(name, gpus=gpus_each)["spec"]
    spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "suspend": True,
            "template": {"spec": spec},
        },
    }


def test_a_suspended_job_takes_nothing_until_its_release_is_judged(
    installed: Installed, namespace: str
) -> None:
    plane = installed.plane
    installed.set_rules(_budget(namespace, 4))
    for i in range(2):
        plane.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_pod(f"run-{i}")))
    eventually(lambda: installed.metric("gpu_admission_gpu_holds") == 0, what="holds ended")

    created = plane.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=json.dumps(kueue_job("sample", 1, 3))
    )
    assert "gpu-quota" not in created.stderr, created.stderr  # 2 of 4 in use, 3 asked: unsaid
    assert installed.metric("gpu_admission_gpu_holds") == 0
    assert kube_json(plane, "get", "pods", "-n", namespace, "-l", "job-name=sample")["items"] == []

    released = plane.kubectl(
        "patch",
        "job",
        "sample",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"suspend":false}}',
    )
    assert (
        f"gpu-quota: namespace {namespace} uses 2 of 4 nvidia.com/gpu; 3 pods x 1 = 3"
        in released.stderr
    ), released.stderr
    # The controller makes the pods; the budget admits two of them, and refuses the third.
    eventually(
        lambda: (
            len(kube_json(plane, "get", "pods", "-n", namespace, "-l", "job-name=sample")["items"])
            == 2
        ),
        what="two of the job's pods admitted",
    )
    eventually(
        lambda: any(
            "gpu-quota" in e.get("message", "")
            for e in kube_json(plane, "get", "events", "-n", namespace)["items"]
        ),
        what="the job controller's FailedCreate naming gpu-quota",
    )
    pods = kube_json(plane, "get", "pods", "-n", namespace, "-l", "job-name=sample")["items"]
    assert len(pods) == 2
