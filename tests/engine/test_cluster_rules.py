"""Quota, priority and schedulability rules over the example cluster snapshot, over HTTPS."""

from __future__ import annotations

import concurrent.futures
import copy
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.paths import SNAPSHOT
from tests.support.pods import pod
from tests.support.reviews import review_for
from tests.support.schema import assert_schema_valid
from tests.support.webhook import Webhook

SNAP = ("--cluster-snapshot", str(SNAPSHOT))


def judge(hook: Webhook, obj: dict[str, Any], namespace: str) -> Any:
    """The verdict on what the apiserver would validate: the object after /mutate's patch."""
    return hook.admit(obj, namespace=namespace)[2]


@pytest.fixture
def hook(webhook_with: Any) -> Webhook:
    started: Webhook = webhook_with(
        {
            "gpu-quota": {
                "budgets": [
                    {
                        "name": "ml-team",
                        "namespaces": ["ml-team"],
                        "limits": {"nvidia.com/gpu": 16},
                    },
                    {
                        "name": "research-h100",
                        "namespaceSelector": {"matchLabels": {"team": "research"}},
                        "products": {"NVIDIA-H100-80GB-HBM3": {"nvidia.com/gpu": 2}},
                    },
                    # batch has no ResourceQuota: this budget is the webhook's alone
                    {"name": "batch", "namespaces": ["batch"], "limits": {"nvidia.com/gpu": 4}},
                ]
            },
            "gpu-priority-class": {
                "defaultClass": "gpu-training",
                "allowedClasses": ["gpu-training", "gpu-serving"],
            },
        },
        args=SNAP,
    )
    return started


def test_a_pod_within_the_budget_is_allowed(hook: Webhook) -> None:
    assert judge(hook, pod(4), namespace="ml-team").allowed


def test_a_pod_over_the_budget_is_denied_with_usage_and_ask(hook: Webhook) -> None:
    verdict = judge(hook, pod(5), namespace="ml-team")
    assert not verdict.allowed
    assert verdict.denied_rules == {"gpu-quota"}
    assert "gpu-quota: namespace ml-team uses 12 of 16 nvidia.com/gpu; this pod asks 5" in (
        verdict.message
    )
    assert "ask for at most 4 nvidia.com/gpu" in verdict.message


def test_native_resource_quota_is_explained_before_the_apiserver_refuses(hook: Webhook) -> None:
    verdict = judge(hook, pod(6), namespace="inference")
    assert not verdict.allowed
    assert (
        "ResourceQuota gpu-quota allows requests.nvidia.com/gpu 8 and 3 are used; this asks 6"
        in verdict.message
    )


def test_a_product_budget_applies_to_pods_pinned_to_that_product(hook: Webhook) -> None:
    pinned = pod(3, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    verdict = judge(hook, pinned, namespace="research")
    assert not verdict.allowed
    assert "at 2 nvidia.com/gpu on NVIDIA-H100-80GB-HBM3 together and they use 0" in (
        verdict.message
    )
    elsewhere = pod(3, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    assert judge(hook, elsewhere, namespace="research").allowed  # pinned elsewhere: no H100 cap


def test_a_product_budget_applies_to_pods_that_could_land_on_that_product(hook: Webhook) -> None:
    """No selector is no way around the H100 cap: the scheduler may pick an H100 node."""
    verdict = judge(hook, pod(3), namespace="research")
    assert not verdict.allowed
    assert "on NVIDIA-H100-80GB-HBM3 together and they use 0 (research 0); this pod asks 3" in (
        verdict.message
    )
    assert "could be scheduled onto NVIDIA-H100-80GB-HBM3" in verdict.message


def test_a_controller_beyond_the_budget_gets_a_warning_not_a_denial(hook: Webhook) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainers"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "t"}},
            "template": {"metadata": {"labels": {"app": "t"}}, "spec": pod(4)["spec"]},
        },
    }
    verdict = judge(hook, deployment, namespace="ml-team")
    assert verdict.allowed
    assert "gpu-quota" in verdict.warned_rules
    assert any("3 pods x 4 = 12" in w for w in verdict.warnings)


def test_require_quota_denies_gpu_pods_where_no_quota_exists(webhook_with: Any) -> None:
    hook: Webhook = webhook_with({"gpu-quota": {"requireQuota": True}}, args=SNAP)
    verdict = judge(hook, pod(1), namespace="default")
    assert not verdict.allowed
    assert "namespace default has no GPU quota" in verdict.message
    assert judge(hook, pod(1), namespace="inference").allowed  # has a ResourceQuota


def test_the_default_class_is_injected_with_matching_priority_fields(hook: Webhook) -> None:
    # The built-in Priority plugin has already run and set priority 0 when the webhook sees it.
    incoming = pod(1, priority=0, preemptionPolicy="PreemptLowerPriority")
    mutated, mutation, verdict = hook.admit(incoming, namespace="ml-team")

    spec = mutated["spec"]
    assert spec["priorityClassName"] == "gpu-training"
    assert spec["priority"] == 10000
    assert spec["preemptionPolicy"] == "PreemptLowerPriority"
    assert mutation.raw["auditAnnotations"]["gpu-priority-class"] == "mutated"
    assert verdict.allowed
    assert_schema_valid(mutated)
    assert hook.mutate(mutated, namespace="ml-team").patch == []


def test_templates_get_the_class_name_only(hook: Webhook) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"template": {"spec": {**pod(1)["spec"], "restartPolicy": "Never"}}},
    }
    mutated, _, verdict = hook.admit(job, namespace="ml-team")
    spec = mutated["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "gpu-training"
    assert "priority" not in spec and "preemptionPolicy" not in spec
    assert verdict.allowed
    assert_schema_valid(mutated)


@pytest.mark.parametrize(
    "name,expected",
    [
        ("system-cluster-critical", "reserved for system components"),
        ("gpu-batch", "not allowed in ml-team"),
    ],
)
def test_disallowed_priority_classes_are_denied(hook: Webhook, name: str, expected: str) -> None:
    verdict = judge(hook, pod(1, priorityClassName=name), namespace="ml-team")
    assert not verdict.allowed
    assert verdict.denied_rules == {"gpu-priority-class"}
    assert expected in verdict.message


def test_a_class_that_does_not_exist_is_denied_listing_real_ones(webhook_with: Any) -> None:
    hook: Webhook = webhook_with({}, args=SNAP)
    verdict = judge(hook, pod(1, priorityClassName="gpu-urgent"), namespace="ml-team")
    assert not verdict.allowed
    assert "'gpu-urgent' does not exist" in verdict.message
    assert "gpu-batch, gpu-serving, gpu-training" in verdict.message


@pytest.mark.parametrize(
    "obj,expected",
    [
        (pod(16), "pod asks 16 nvidia.com/gpu; the largest node has 8"),
        (
            pod(2, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-L4"}),
            "the largest node among nodes matching nvidia.com/gpu.product=NVIDIA-L4 has 1",
        ),
    ],
    ids=["more than any node", "too many for the pool"],
)
def test_pods_that_could_never_schedule_are_denied(
    hook: Webhook, obj: dict[str, Any], expected: str
) -> None:
    verdict = judge(hook, obj, namespace="research")
    assert not verdict.allowed
    assert "gpu-schedulable" in verdict.denied_rules
    assert expected in verdict.message


ABSENT = [
    pytest.param(
        pod(1, "nvidia.com/mig-2g.20gb"), "offers nvidia.com/mig-2g.20gb", id="missing MIG profile"
    ),
    pytest.param(
        pod(1, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A10G"}),
        "matches nvidia.com/gpu.product=NVIDIA-A10G",
        id="missing product",
    ),
]


@pytest.mark.parametrize(("obj", "expected"), ABSENT)
def test_a_shape_no_node_has_is_a_warning_while_pools_may_scale_from_zero(
    hook: Webhook, obj: dict[str, Any], expected: str
) -> None:
    verdict = judge(hook, obj, namespace="research")
    assert verdict.allowed
    assert "gpu-schedulable" in verdict.warned_rules
    assert any(expected in w and "a pool at zero?" in w for w in verdict.warnings)


@pytest.mark.parametrize(("obj", "expected"), ABSENT)
def test_a_shape_no_node_has_is_denied_without_autoscaling(
    webhook_with: Any, obj: dict[str, Any], expected: str
) -> None:
    hook: Webhook = webhook_with({"gpu-schedulable": {"autoscaling": "none"}}, args=SNAP)
    verdict = judge(hook, obj, namespace="research")
    assert not verdict.allowed
    assert "gpu-schedulable" in verdict.denied_rules
    assert f"no node, existing or provisionable, {expected}" in verdict.message


def test_a_provisionable_shape_counts_as_a_node(webhook_with: Any) -> None:
    shape = {"name": "a10g", "labels": {"nvidia.com/gpu.product": "NVIDIA-A10G"}, "gpus": {}}
    shape["gpus"] = {"nvidia.com/gpu": 4}
    hook: Webhook = webhook_with({"gpu-schedulable": {"provisionable": [shape]}}, args=SNAP)
    a10g = {"nvidia.com/gpu.product": "NVIDIA-A10G"}
    assert judge(hook, pod(4, nodeSelector=a10g), namespace="research").allowed
    too_many = judge(hook, pod(5, nodeSelector=a10g), namespace="research")
    assert "gpu-schedulable" in too_many.denied_rules
    # Declared provisioning makes absence a fact: a product in neither is denied.
    b200 = judge(
        hook, pod(1, nodeSelector={"nvidia.com/gpu.product": "B200"}), namespace="research"
    )
    assert "gpu-schedulable" in b200.denied_rules


def test_required_affinity_over_existing_products_is_fine(hook: Webhook) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "nvidia.com/gpu.product",
                                "operator": "In",
                                "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"],
                            },
                            {
                                "key": "topology.kubernetes.io/zone",
                                "operator": "In",
                                "values": ["a"],
                            },
                        ]
                    }
                ]
            }
        }
    }
    # In `default`, where no budget caps H100: this pod could land on one (no node has zone a
    # yet, so it waits for a new node of either product).
    assert judge(hook, pod(8, affinity=affinity), namespace="default").allowed


def _post_many(hook: Webhook, certs: Path, reviews: list[dict[str, Any]]) -> list[bool]:
    """Concurrent validations on separate keep-alive connections, as several apiservers would."""
    ctx = ssl.create_default_context(cafile=certs / "ca.crt")

    def post(review: dict[str, Any]) -> bool:
        with httpx.Client(verify=ctx, timeout=10) as client:
            resp = client.post(f"{hook.url}/validate?timeout=10s", json=review)
            assert resp.status_code == 200
            return bool(resp.json()["response"]["allowed"])

    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        return list(pool.map(post, reviews))


def test_concurrent_creates_near_the_limit_never_exceed_the_budget(
    hook: Webhook, certs: Path
) -> None:
    # Ten different pods (the validating webhook sees each one's final name, generateName
    # included). The same name posted ten times holds once: a repeated review replaces its hold.
    # A budget only the webhook keeps (no ResourceQuota in batch): its holds bound the burst.
    reviews = []
    for i in range(10):
        one = pod(1, priorityClassName="gpu-training")
        one["metadata"]["name"] = f"train-{i}"
        reviews.append(review_for(one, namespace="batch"))
    assert sum(_post_many(hook, certs, reviews)) == 4  # 0 of 4 in use


def test_where_a_resource_quota_caps_the_gpus_the_apiserver_bounds_the_burst(
    hook: Webhook, certs: Path
) -> None:
    """ml-team's ResourceQuota (12 of 16 used) is exact across replicas and unforgeable: the
    webhook holds nothing for it, admits each pod that fits the count it sees, and the quota
    refuses what goes over (a forged review can no longer hold the namespace)."""
    reviews = []
    for i in range(10):
        one = pod(1, priorityClassName="gpu-training")
        one["metadata"]["name"] = f"train-{i}"
        reviews.append(review_for(one, namespace="ml-team"))
    assert all(_post_many(hook, certs, reviews))
    assert not judge(hook, pod(5), namespace="ml-team").allowed  # 12 + 5 > 16, said early


def test_dry_run_creates_reserve_nothing(hook: Webhook, certs: Path) -> None:
    four = pod(4, priorityClassName="gpu-training")
    dry = [review_for(copy.deepcopy(four), namespace="ml-team", dry_run=True) for _ in range(5)]
    assert all(_post_many(hook, certs, dry))
    assert judge(hook, pod(4), namespace="ml-team").allowed


def test_without_cluster_facts_the_cluster_rules_stay_quiet(webhook: Webhook) -> None:
    verdict = webhook.validate(pod(64), namespace="ml-team")
    assert verdict.allowed and verdict.warnings == []
