"""A GPU pod through the real apiserver: stored as the webhook's patch describes, refused with
the webhook's message verbatim, warned through `Warning` headers, and a server-side dry run that
returns the mutated object and takes no GPU hold."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.support import (
    Installed,
    contains,
    eventually,
    gpu_pod,
    kube_json,
    post_review,
    priority_class,
)

DEFAULT_CLASS = "e2e-gpu-default"


@pytest.fixture(scope="module")
def default_class(installed: Installed) -> Iterator[str]:
    """A default priority class for GPU pods, existing in the cluster and named by the rules."""
    plane = installed.plane
    priority_class(
        plane,
        DEFAULT_CLASS,
        1000,
        preemptionPolicy="Never",
        description="GPU pods that name no class (gpu-admission end-to-end tests)",
    )
    installed.set_rules(f"rules:\n  gpu-priority-class:\n    defaultClass: {DEFAULT_CLASS}\n")
    # the live cache has seen the class once the webhook injects it
    eventually(
        lambda: any(
            op["path"] == "/spec/priorityClassName"
            for op in post_review(installed, "mutate", gpu_pod("p"), "default").patch
        ),
        what="the PriorityClass reaching the webhook's live cache",
    )
    yield DEFAULT_CLASS
    installed.set_rules("{}\n")
    plane.kubectl("delete", "priorityclass", DEFAULT_CLASS, check=False)


def webhook_result(hook: Installed, pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The pod as the webhook's own /mutate answer patches it."""
    return dict(post_review(hook, "mutate", pod, namespace).apply(copy.deepcopy(pod)))


def test_a_requests_only_gpu_pod_is_stored_as_the_webhooks_patch_describes(
    installed: Installed, namespace: str, default_class: str
) -> None:
    plane = installed.plane
    pod = gpu_pod("stored")
    expected = webhook_result(installed, pod, namespace)["spec"]
    plane.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(pod))
    got = kube_json(plane, "get", "pod", "stored", "-n", namespace)["spec"]

    model = got["containers"][0]
    assert model["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert model["readinessProbe"]["initialDelaySeconds"] >= 60
    assert {"name": "dshm", "mountPath": "/dev/shm"} in [
        {k: m[k] for k in ("name", "mountPath")} for m in model["volumeMounts"]
    ]
    assert got["priorityClassName"] == default_class
    assert got["priority"] == 1000 and got["preemptionPolicy"] == "Never"
    # every field the patch wrote is stored as the patch wrote it, beside what the apiserver's
    # ServiceAccount admission added before the webhook was called (its token volume)
    token = [v["name"] for v in got["volumes"] if v["name"].startswith("kube-api-access-")]
    got["volumes"] = [v for v in got["volumes"] if v["name"] not in token]
    for container in got["containers"]:
        mounts = [m for m in container.get("volumeMounts", []) if m["name"] not in token]
        container["volumeMounts"] = mounts
    for field in ("containers", "volumes", "priorityClassName", "priority", "preemptionPolicy"):
        differences = contains(got.get(field), expected.get(field), field)
        assert not differences, differences
    # the apiserver adds its own not-ready/unreachable tolerations after ours
    for toleration in expected["tolerations"]:
        assert toleration in got["tolerations"]
    assert any(t.get("key") == "nvidia.com/gpu" for t in got["tolerations"])


def test_a_misconfigured_gpu_pod_is_refused_with_the_webhooks_message_verbatim(
    installed: Installed, namespace: str
) -> None:
    pod = gpu_pod("sidecar-sees-all")
    pod["spec"]["containers"].append(
        {
            "name": "sidecar",
            "image": "busybox",
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        }
    )
    mutated = webhook_result(installed, pod, namespace)
    answer = post_review(installed, "validate", mutated, namespace)
    assert not answer.allowed and "visible-devices" in answer.message
    done = installed.plane.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=json.dumps(pod), check=False
    )
    assert done.returncode != 0
    assert 'admission webhook "validate.gpu-admission.io" denied the request' in done.stderr
    assert answer.message in done.stderr, (answer.message, done.stderr)
    assert (
        "NotFound"
        in installed.plane.kubectl(
            "get", "pod", "sidecar-sees-all", "-n", namespace, check=False
        ).stderr
    )


def test_warnings_reach_the_client_as_warning_headers(installed: Installed, namespace: str) -> None:
    pod = gpu_pod("no-memory-limit")
    del pod["spec"]["containers"][0]["resources"]["limits"]
    mutate = post_review(installed, "mutate", pod, namespace)
    validate = post_review(installed, "validate", mutate.apply(copy.deepcopy(pod)), namespace)
    warnings = mutate.warnings + validate.warnings
    assert any(w.startswith("gpu-memory-limit") for w in warnings), warnings
    done = installed.plane.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(pod))
    for warning in warnings:
        assert f"Warning: {warning}" in done.stderr, (warning, done.stderr)


def test_a_server_side_dry_run_returns_the_mutated_pod_and_holds_no_gpus(
    installed: Installed, namespace: str
) -> None:
    # a budget over the namespace: a real create of this pod would be held against it
    installed.set_rules(
        "rules:\n  gpu-quota:\n    budgets:\n"
        f"      - {{name: dry, namespaces: [{namespace}], limits: {{nvidia.com/gpu: 8}}}}\n"
    )
    holds = installed.metric("gpu_admission_gpu_holds")
    pod = gpu_pod("dry", gpus=2)
    done = installed.plane.kubectl(
        "create",
        "--dry-run=server",
        "-o",
        "json",
        "-n",
        namespace,
        "-f",
        "-",
        stdin=json.dumps(pod),
    )
    returned = json.loads(done.stdout)["spec"]
    assert returned["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert any(v["name"] == "dshm" for v in returned["volumes"])
    assert installed.metric("gpu_admission_gpu_holds") == holds
    assert (
        "NotFound"
        in installed.plane.kubectl("get", "pod", "dry", "-n", namespace, check=False).stderr
    )
