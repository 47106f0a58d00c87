"""The admission protocol over HTTPS: which requests are touched, and how rules are switched."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.reviews import review_for
from tests.support.schema import assert_schema_valid
from tests.support.webhook import Webhook
from webhook.engine.findings import WARNING_LIMIT


def gpu_container(name: str = "llm", gpus: str = "1", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "vllm/vllm-openai:v0.6.3",
        "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "32Gi"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8000}},
        **extra,
    }


def gpu_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "llm-"},
        "spec": {"containers": [gpu_container()], **spec},
    }


def template(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "llm"}}, "spec": spec}


def controller(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    selector = {"matchLabels": {"app": "llm"}}
    api = {"Job": "batch/v1", "CronJob": "batch/v1", "ReplicationController": "v1"}.get(
        kind, "apps/v1"
    )
    obj: dict[str, Any] = {"apiVersion": api, "kind": kind, "metadata": {"name": "llm"}}
    if kind == "CronJob":
        spec = {**spec, "restartPolicy": "Never"}
        obj["spec"] = {"schedule": "@daily", "jobTemplate": {"spec": {"template": template(spec)}}}
    elif kind == "Job":
        obj["spec"] = {"template": template({**spec, "restartPolicy": "Never"})}
    elif kind == "ReplicationController":
        obj["spec"] = {"selector": {"app": "llm"}, "template": template(spec)}
    elif kind == "StatefulSet":
        obj["spec"] = {"selector": selector, "serviceName": "llm", "template": template(spec)}
    else:
        obj["spec"] = {"selector": selector, "template": template(spec)}
    return obj


PREFIXES = {
    "Pod": "/spec/",
    "Deployment": "/spec/template/spec/",
    "StatefulSet": "/spec/template/spec/",
    "DaemonSet": "/spec/template/spec/",
    "ReplicaSet": "/spec/template/spec/",
    "ReplicationController": "/spec/template/spec/",
    "Job": "/spec/template/spec/",
    "CronJob": "/spec/jobTemplate/spec/template/spec/",
}


@pytest.mark.parametrize("kind", sorted(PREFIXES))
def test_every_workload_kind_is_patched_at_its_pod_spec(webhook: Webhook, kind: str) -> None:
    spec = {"containers": [gpu_container()]}
    obj = gpu_pod() if kind == "Pod" else controller(kind, spec)

    mutated, mutation, verdict = webhook.admit(obj)

    paths = [op["path"] for op in mutation.patch]
    assert paths, "a GPU workload without toleration or /dev/shm must be patched"
    assert all(p.startswith(PREFIXES[kind]) for p in paths), paths
    assert verdict.allowed, verdict.message
    assert_schema_valid(mutated)
    assert webhook.mutate(mutated).patch == []


def test_uid_is_echoed_for_every_request_on_one_connection(webhook: Webhook) -> None:
    for i in range(20):
        review = review_for(gpu_pod(), uid=f"uid-{i}")
        assert webhook.review("mutate", review).raw["uid"] == f"uid-{i}"


def test_pod_update_is_never_patched_or_denied(webhook: Webhook) -> None:
    """A pod's spec is immutable: a patch would make the apiserver refuse a label change."""
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "500m"
    answer = webhook.mutate(pod, operation="UPDATE", old=pod)
    assert answer.allowed and answer.patch == []
    assert webhook.validate(pod, operation="UPDATE", old=pod).allowed


def test_scaling_an_old_noncompliant_deployment_is_allowed_untouched(webhook: Webhook) -> None:
    bad = controller("Deployment", {"containers": [gpu_container(gpus="500m")]})
    scaled = copy.deepcopy(bad)
    scaled["spec"]["replicas"] = 5

    assert webhook.mutate(scaled, operation="UPDATE", old=bad).patch == []
    assert webhook.validate(scaled, operation="UPDATE", old=bad).allowed


def test_a_changed_template_on_update_is_patched_and_judged(webhook: Webhook) -> None:
    old = controller("Deployment", {"containers": [gpu_container()]})
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = (
        "500m"
    )

    assert webhook.mutate(new, operation="UPDATE", old=old).patch != []
    verdict = webhook.validate(new, operation="UPDATE", old=old)
    assert not verdict.allowed
    assert verdict.denied_rules == {"gpu-whole-quantity"}


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed_untouched(webhook: Webhook, operation: str) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    review = review_for(None, kind="Pod", operation=operation, old=pod)
    for endpoint in ("mutate", "validate"):
        answer = webhook.review(endpoint, review)
        assert answer.allowed and answer.patch == []


def test_subresources_are_allowed_untouched(webhook: Webhook) -> None:
    review = review_for(gpu_pod(), operation="UPDATE")
    review["request"]["subResource"] = "status"
    assert webhook.review("mutate", review).patch == []
    assert webhook.review("validate", review).allowed


def test_namespace_comes_from_the_object_when_the_request_has_none(webhook: Webhook) -> None:
    pod = gpu_pod()
    pod["metadata"]["namespace"] = "kube-system"
    assert webhook.mutate(pod, namespace="").patch == []
    assert webhook.mutate(gpu_pod(), namespace="").patch != []


def test_mutate_never_warns_or_denies_policy(webhook: Webhook) -> None:
    """Verdicts come from /validate only, so kubectl never shows a warning twice."""
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "500m"}}
    answer = webhook.mutate(pod)
    assert answer.allowed
    assert answer.warnings == []


def test_warnings_are_short_and_few(webhook: Webhook) -> None:
    long_name = "a-container-name-that-goes-on-and-on-" + "x" * 60
    pod = gpu_pod()
    pod["spec"]["containers"] = [
        {"name": f"{long_name}-{i}", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
        for i in range(6)
    ]
    verdict = webhook.validate(pod)
    assert verdict.allowed
    assert 1 < len(verdict.warnings) <= 5
    assert all(len(w) <= WARNING_LIMIT for w in verdict.warnings)
    assert "more warnings not shown" in verdict.warnings[-1]


def test_validate_reports_audit_annotations_per_rule(webhook: Webhook) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"]["limits"].pop("memory")
    verdict = webhook.validate(pod)
    assert verdict.raw["auditAnnotations"] == {"gpu-memory-limit": "warn"}


def test_with_the_fix_off_requests_only_is_denied_not_patched(webhook_with: Any) -> None:
    hook = webhook_with({"gpu-requests-limits": {"fix": False}})
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "2"},
        "limits": {"memory": "32Gi"},
    }
    _, mutation, verdict = hook.admit(pod)

    assert not any("resources/limits" in op["path"] for op in mutation.patch)
    assert not verdict.allowed
    assert verdict.denied_rules == {"gpu-requests-limits"}
    assert 'spec.containers[0].resources.limits["nvidia.com/gpu"] to 2' in verdict.message
    assert "switched off" in verdict.message


def test_startup_probe_strategy_adds_a_startup_probe(webhook_with: Any) -> None:
    hook = webhook_with({"gpu-probe-delays": {"strategy": "startup-probe"}})
    mutated, _, _ = hook.admit(gpu_pod())

    container = mutated["spec"]["containers"][0]
    assert container["startupProbe"] == {
        "httpGet": {"path": "/health", "port": 8000},
        "periodSeconds": 10,
        "failureThreshold": 60,
        "successThreshold": 1,
    }
    assert "initialDelaySeconds" not in container["readinessProbe"]
    assert_schema_valid(mutated)
    assert hook.mutate(mutated).patch == []


def test_a_rule_switched_off_says_nothing(webhook_with: Any) -> None:
    hook = webhook_with({"visible-devices": {"mode": "off"}, "gpu-shm": {"mutate": False}})
    pod = gpu_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    mutated, mutation, verdict = hook.admit(pod)
    assert verdict.allowed
    assert "volumes" not in mutated["spec"]
    assert mutation.patch != []  # the toleration still comes


def test_health_and_readiness(webhook: Webhook) -> None:
    assert webhook.client.get(f"{webhook.url}/healthz").status_code == 200
    assert webhook.client.get(f"{webhook.url}/readyz").status_code == 200


def test_mutate_annotates_exactly_the_rules_that_changed_the_object(webhook: Webhook) -> None:
    answer = webhook.mutate(gpu_pod())
    assert answer.raw["auditAnnotations"] == {
        "gpu-tolerations": "mutated",
        "gpu-shm": "mutated",
        "gpu-probe-delays": "mutated",
    }
    again = webhook.mutate(answer.apply(gpu_pod()))
    assert "auditAnnotations" not in again.raw
