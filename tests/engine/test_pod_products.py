"""Product budgets that cannot be dodged: every GPU product a pod could land on, in process.

A budget that caps a product applies to any pod that could be scheduled onto it (In, NotIn,
Exists, instance types, ORed affinity terms, nodeName, pools at zero), and holds charge each.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import SNAPSHOT
from tests.support.pods import pod
from webhook.engine.accounting import pod_products
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import evaluate
from webhook.engine.podviews import PodView, pod_views
from webhook.engine.subject import subject_for
from webhook.facts.model import EMPTY_USAGE, PodGpus
from webhook.facts.reservations import Reservations, ReservingFacts
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules

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
