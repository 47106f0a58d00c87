"""Quota, priority and schedulability rules over the example cluster snapshot, over HTTPS."""

from __future__ import annotations

import concurrent.futures
import copy
import ssl
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from conftest import SNAPSHOT, Webhook, assert_schema_valid, review_for

from webhook.engine.accounting import pod_products
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import evaluate
from webhook.engine.podviews import PodView, pod_views
from webhook.engine.subject import subject_for
from webhook.facts.model import EMPTY_USAGE, PodGpus
from webhook.facts.reservations import Reservations, ReservingFacts
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules

SNAP = ("--cluster-snapshot", str(SNAPSHOT))


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
    assert "uses 0 of 2 nvidia.com/gpu on NVIDIA-H100-80GB-HBM3" in verdict.message
    elsewhere = pod(3, nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    assert judge(hook, elsewhere, namespace="research").allowed  # pinned elsewhere: no H100 cap


def test_a_product_budget_applies_to_pods_that_could_land_on_that_product(hook: Webhook) -> None:
    """No selector is no way around the H100 cap: the scheduler may pick an H100 node."""
    verdict = judge(hook, pod(3), namespace="research")
    assert not verdict.allowed
    assert "uses 0 of 2 nvidia.com/gpu on NVIDIA-H100-80GB-HBM3; this pod asks 3" in (
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
    reviews = []
    for i in range(10):
        one = pod(1, priorityClassName="gpu-training")
        one["metadata"]["name"] = f"train-{i}"
        reviews.append(review_for(one, namespace="ml-team"))
    assert sum(_post_many(hook, certs, reviews)) == 4  # 12 of 16 in use


def test_dry_run_creates_reserve_nothing(hook: Webhook, certs: Path) -> None:
    four = pod(4, priorityClassName="gpu-training")
    dry = [review_for(copy.deepcopy(four), namespace="ml-team", dry_run=True) for _ in range(5)]
    assert all(_post_many(hook, certs, dry))
    assert judge(hook, pod(4), namespace="ml-team").allowed


def test_without_cluster_facts_the_cluster_rules_stay_quiet(webhook: Webhook) -> None:
    verdict = webhook.validate(pod(64), namespace="ml-team")
    assert verdict.allowed and verdict.warnings == []


# ---- pod_products: every GPU product a pod could land on (in process) ----

H100, A100, L4 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4"
PRODUCT, ITYPE = "nvidia.com/gpu.product", "node.kubernetes.io/instance-type"
EXAMPLE = load_snapshot(SNAPSHOT)


def _view(obj: dict[str, Any]) -> PodView:
    return pod_views(obj, group="", kind="Pod", is_gpu=lambda name: name.startswith("nvidia.com/"))[
        0
    ]


def _required(*terms: list[dict[str, Any]], fields: list[dict[str, Any]] | None = None) -> Any:
    nodes: list[dict[str, Any]] = [{"matchExpressions": t} for t in terms]
    if fields is not None:
        nodes.append({"matchFields": fields})
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": nodes}
        }
    }


def _in(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(
    "obj,expected",
    [
        (pod(1), {H100, A100, L4}),
        (pod(1, nodeSelector={PRODUCT: H100}), {H100}),
        (pod(1, affinity=_required([_in(PRODUCT, "NotIn", A100)])), {H100, L4}),
        (pod(1, affinity=_required([{"key": PRODUCT, "operator": "Exists"}])), {H100, A100, L4}),
        (pod(1, affinity=_required([{"key": PRODUCT, "operator": "DoesNotExist"}])), set()),
        (pod(1, nodeSelector={ITYPE: "p5.48xlarge"}), {H100}),
        (pod(1, affinity=_required([_in(ITYPE, "In", "g6.xlarge", "p4de.24xlarge")])), {A100, L4}),
        (
            pod(1, affinity=_required([_in(PRODUCT, "In", A100)], [_in(ITYPE, "In", "g6.xlarge")])),
            {A100, L4},
        ),
        (
            pod(
                1,
                affinity=_required([_in(PRODUCT, "In", A100, H100), _in(ITYPE, "In", "g6.xlarge")]),
            ),
            {A100, H100},
        ),
        (pod(1, affinity=_required([_in("nvidia.com/gpu.memory", "Gt", "80000")])), {H100, A100}),
        (pod(1, affinity=_required([_in("nvidia.com/gpu.memory", "Lt", "30000")])), {L4}),
        (pod(1, "nvidia.com/mig-1g.10gb"), {H100}),
        (pod(1, nodeName="a100-2"), {A100}),
        (pod(1, nodeName="ghost-0", nodeSelector={PRODUCT: L4}), {L4}),
        (pod(1, nodeSelector={"karpenter.sh/nodepool": "h100-spot"}), {H100, A100, L4}),
        (pod(1, affinity=_required(fields=[_in("metadata.name", "In", "l4-3")])), {L4}),
    ],
    ids=[
        "no selector: every product",
        "nodeSelector on the product",
        "NotIn",
        "Exists",
        "DoesNotExist on the product: no GPU product",
        "instance type",
        "instance types through affinity",
        "ORed terms: product or instance type",
        "ANDed expressions: an impossible pair waits for a new node",
        "Gt on another GPU label",
        "Lt on another GPU label",
        "a resource only one product offers",
        "nodeName",
        "nodeName of a node not in the facts: the selectors decide",
        "a label no node has yet: any product a new node may have",
        "matchFields on the node name",
    ],
)
def test_pod_products_follows_every_way_a_pod_reaches_a_product(
    obj: dict[str, Any], expected: set[str]
) -> None:
    facts = EXAMPLE.facts_for("ml-team")
    assert pod_products(_view(obj), facts) == expected


@pytest.mark.parametrize(
    "spec,reaches",
    [
        ({}, True),
        ({"nodeSelector": {ITYPE: "p6-b200.48xlarge"}}, True),  # other labels: unknown
        ({"nodeSelector": {PRODUCT: H100}}, False),
        ({"affinity": _required([_in(PRODUCT, "NotIn", "NVIDIA-B200")])}, False),
        ({"affinity": _required([_in(PRODUCT, "In", "NVIDIA-B200", H100)])}, True),
        ({"affinity": _required([_in(PRODUCT, "In", H100)], [_in(ITYPE, "In", "p6")])}, True),
        ({"nodeName": "h100-0"}, False),
    ],
    ids=["no selector", "instance type", "pinned elsewhere", "NotIn", "In", "ORed", "nodeName"],
)
def test_a_budgeted_product_without_nodes_is_reached_unless_the_product_label_excludes_it(
    spec: dict[str, Any], reaches: bool
) -> None:
    """A node group scaled to zero: no node to judge, only the product label can rule it out."""
    facts = EXAMPLE.facts_for("ml-team")
    found = pod_products(_view(pod(1, **spec)), facts, candidates=["NVIDIA-B200", H100])
    assert ("NVIDIA-B200" in found) is reaches


def test_without_node_facts_only_the_product_label_narrows_the_candidates() -> None:
    notin = _view(pod(1, affinity=_required([_in(PRODUCT, "NotIn", A100)])))
    assert pod_products(notin, None, candidates=[H100, A100]) == {H100}
    assert pod_products(notin, None) == frozenset()


def test_usage_charges_a_pending_pod_to_every_product_it_could_reach() -> None:
    gpus = {"nvidia.com/gpu": Fraction(2)}
    running = PodGpus("ml-team", "a", "Running", gpus, "h100-0", product=H100)
    pending = PodGpus("ml-team", "b", "Pending", gpus, reach=(H100, L4))
    usage = EMPTY_USAGE.plus([running, pending])
    assert usage.by_resource["nvidia.com/gpu"] == 4  # counted once per resource
    assert usage.by_product[("nvidia.com/gpu", H100)] == 4
    assert usage.by_product[("nvidia.com/gpu", L4)] == 2
    assert ("nvidia.com/gpu", A100) not in usage.by_product
    assert usage.plus([pending], -1).by_product[("nvidia.com/gpu", L4)] == 0


def _rules(tmp_path: Path, budget: dict[str, Any]) -> Any:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"rules": {"gpu-quota": budget}}))
    return compile_rules(load_rules(tmp_path))


def test_an_admitted_pods_hold_counts_against_every_product_it_could_reach(
    tmp_path: Path,
) -> None:
    """A NotIn pod admitted but not yet seen by the watch holds GPUs on H100 and L4 (not
    A100): the next pod pinned to H100 cannot take them too."""
    rules = _rules(
        tmp_path,
        {
            "budgets": [
                {
                    "name": "ml",
                    "namespaces": ["ml-team"],
                    "products": {
                        H100: {"nvidia.com/gpu": 13},
                        A100: {"nvidia.com/gpu": 1},
                        L4: {"nvidia.com/gpu": 12},
                    },
                }
            ]
        },
    )
    holds = Reservations(ttl=60)
    source = ReservingFacts(EXAMPLE, holds)

    def create(obj: dict[str, Any]) -> Any:
        subject = subject_for(obj, namespace="ml-team")
        return evaluate(subject, rules, source.facts_for("ml-team"))

    notin = create(pod(1, affinity=_required([_in(PRODUCT, "NotIn", A100)])))
    assert notin.allowed, notin.message()  # 12 of 13 H100 in use: one more fits
    assert notin.hold is not None and notin.hold.reach == (H100, L4)
    holds.hold(notin.hold)
    pinned = create(pod(1, nodeSelector={PRODUCT: H100}))
    assert not pinned.allowed
    assert "uses 13 of 13 nvidia.com/gpu on NVIDIA-H100-80GB-HBM3" in pinned.message()
    # A100 (cap 1) was never held: NotIn keeps the pod off it.
    assert create(pod(1, nodeSelector={PRODUCT: A100})).allowed


def test_holds_share_one_tuple_per_product_set(tmp_path: Path) -> None:
    rules = _rules(
        tmp_path,
        {
            "budgets": [
                {
                    "name": "ml",
                    "namespaces": ["ml-team"],
                    "products": {H100: {"nvidia.com/gpu": 99}, A100: {"nvidia.com/gpu": 99}},
                }
            ]
        },
    )
    facts = EXAMPLE.facts_for("ml-team")
    a, b = (evaluate(subject_for(pod(1), namespace="ml-team"), rules, facts).hold for _ in range(2))
    assert a is not None and b is not None
    assert a.reach == (A100, H100)  # sorted, budgeted products only (L4 has no cap)
    assert a.reach is b.reach


def test_the_denial_suggests_only_products_the_pod_could_be_pinned_to(tmp_path: Path) -> None:
    """A product its own affinity excludes (A100 under NotIn), or whose nodes are too small
    (L4: 1 GPU), is no way out; A100 is one for a pod that only pinned H100 itself."""
    budget = {"name": "ml", "namespaces": ["ml-team"], "products": {H100: {"nvidia.com/gpu": 13}}}
    rules = _rules(tmp_path, {"budgets": [budget]})
    facts = EXAMPLE.facts_for("ml-team")

    def message(obj: dict[str, Any]) -> str:
        decision = evaluate(subject_for(obj, namespace="ml-team"), rules, facts)
        assert not decision.allowed
        return decision.message()

    notin = message(pod(2, affinity=_required([_in(PRODUCT, "NotIn", A100)])))
    assert "so that product's cap applies. Ask for at most 1 nvidia.com/gpu on" in notin
    assert "nodeSelector" not in notin.split("Fix:")[1].replace("its nodeSelector", "")
    pinned = message(pod(2, nodeSelector={PRODUCT: H100}))
    assert f"set spec.nodeSelector {PRODUCT}: {A100} to run elsewhere, or ask" in pinned
