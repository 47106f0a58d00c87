"""What a GPU budget counts besides whole GPUs: the share of a GPU a sharing scheduler gives by
annotation (KAI/Run:ai `gpu-fraction`, `gpu-memory`), HAMi's per-GPU units, and nothing for a
job a queue holds suspended. The same count at admission (ask and hold) and in the live cache
(what the watch shows), so eight half-GPU pods fill a budget of 4 however they are counted.
The golden cases `quota-budget-kai-*`, `-hami-*` and `-suspended-*` show whole objects."""

from __future__ import annotations

import copy
import io
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.paths import ROOT
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import evaluate
from webhook.engine.subject import subject_for
from webhook.facts.model import Facts, Node, NodeIndex, Usage
from webhook.facts.objects import pod_summary
from webhook.facts.podpages import decode_pod_page
from webhook.facts.reservations import Reservations, ReservingFacts
from webhook.podrequest import per_gpu_scaled, shared_gpus
from webhook.quantity import Amount
from webhook.rulecli.commands import check
from webhook.ruleset.files import load_rules
from webhook.ruleset.models import RuleSet

GPU = "nvidia.com/gpu"
KAI_POD = yaml.safe_load(
    (ROOT / "tests/golden/quota-budget-kai-ninth-half-gpu-denied/input.yaml").read_text()
)
BUDGET_OF_4 = {
    "rules": {
        "gpu-quota": {"budgets": [{"name": "team", "namespaces": ["ml"], "limits": {GPU: 4}}]}
    }
}


def _no_node(_: str) -> str:
    return ""


def _kai(name: str, **notes: str) -> dict[str, Any]:
    pod = copy.deepcopy(KAI_POD)
    pod["metadata"]["name"] = name
    pod["metadata"]["namespace"] = "ml"
    pod["metadata"]["annotations"] = notes or {"gpu-fraction": "0.5"}
    return pod


# --- reading the annotations ------------------------------------------------------------------


def test_a_fraction_counts_its_part_of_a_gpu_on_each_of_its_devices() -> None:
    assert shared_gpus({"gpu-fraction": "0.5"}, None) == Fraction(1, 2)
    assert shared_gpus({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}, None) == 1
    assert shared_gpus({"gpu-fraction": "250m"}, None) == Fraction(1, 4)


def test_gpu_memory_counts_its_share_of_the_gpu_it_gets_when_that_is_known() -> None:
    assert shared_gpus({"gpu-memory": "20000"}, 80000) == Fraction(1, 4)
    assert shared_gpus({"gpu-memory": "20000", "gpu-fraction-num-devices": "2"}, 80000) == (
        Fraction(1, 2)
    )
    assert shared_gpus({"gpu-memory": "20000"}, None) is None  # no GPU memory known: unsaid
    assert shared_gpus({"gpu-memory": "90000"}, 80000) == 1  # never more than the GPU


def test_shares_no_scheduler_would_grant_count_nothing() -> None:
    for notes in (
        {"gpu-fraction": "1.5"},
        {"gpu-fraction": "0"},
        {"gpu-fraction": "-0.5"},
        {"gpu-fraction": "half"},
        {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"},
        {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "two"},
        {"gpu-memory": "2Gi"},
        {"gpu-memory": "0"},
        {},
    ):
        assert shared_gpus(notes, 80000) is None, notes


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["gpu-fraction", "gpu-memory", "gpu-fraction-num-devices", "x"]),
        st.one_of(st.text(max_size=12), st.integers(), st.none()),
    ),
    st.one_of(st.none(), st.integers(min_value=1, max_value=200_000)),
)
def test_any_annotations_give_a_share_of_at_most_a_gpu_per_device_or_none(
    notes: dict[str, Any], memory: int | None
) -> None:
    share = shared_gpus(notes, memory)
    if share is not None:
        devices = int(notes.get("gpu-fraction-num-devices") or 1)
        assert 0 < share <= devices


def test_hami_units_are_per_gpu() -> None:
    asks: dict[str, Amount] = {GPU: 2, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}
    assert per_gpu_scaled(asks) == {GPU: 2, "nvidia.com/gpumem": 6000, "nvidia.com/gpucores": 60}
    one: dict[str, Amount] = {"nvidia.com/gpumem": 3000}  # HAMi gives such a container one GPU
    assert per_gpu_scaled(one) is one


# --- the live cache ---------------------------------------------------------------------------


def test_the_cache_counts_a_sharing_pod_s_fraction() -> None:
    summary = pod_summary(_kai("nb"), _no_node)
    assert summary is not None
    assert summary.gpus == {GPU: Fraction(1, 2)}


def test_the_default_scheduler_grants_no_share() -> None:
    for scheduler in (None, "default-scheduler"):
        pod = _kai("nb")
        if scheduler is None:
            del pod["spec"]["schedulerName"]
        else:
            pod["spec"]["schedulerName"] = scheduler
        assert pod_summary(pod, _no_node) is None


def test_a_bound_gpu_memory_pod_counts_its_share_of_its_node_s_gpu() -> None:
    pod = _kai("nb", **{"gpu-memory": "20386"})
    assert pod_summary(pod, _no_node, lambda _: 81544) is None  # pending: its GPU unknown
    pod["spec"]["nodeName"] = "h100-0"
    summary = pod_summary(pod, _no_node, {"h100-0": 81544}.get)
    assert summary is not None
    assert summary.gpus == {GPU: Fraction(1, 4)}


def test_the_cache_counts_hami_units_per_gpu() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "containers": [
                {"resources": {"limits": {GPU: "2", "nvidia.com/gpumem": "20000"}}},
            ]
        },
    }
    summary = pod_summary(pod, _no_node)
    assert summary is not None
    assert summary.gpus == {GPU: 2, "nvidia.com/gpumem": 40000}


def test_a_relist_page_keeps_what_a_share_is_read_from() -> None:
    pods = [_kai("a"), _kai("b", **{"gpu-memory": "2000"})]
    pods[1]["spec"]["nodeName"] = "n"
    body = orjson.dumps({"kind": "PodList", "metadata": {}, "items": pods})
    for full, slim in zip(pods, decode_pod_page(body)["items"], strict=True):
        memory = {"n": 8000}.get
        assert pod_summary(slim, _no_node, memory) == pod_summary(full, _no_node, memory)
        assert pod_summary(slim, _no_node, memory) is not None


# --- admission: ask and hold ------------------------------------------------------------------


class _Source:
    """A namespace with nothing in use, no nodes: every GPU it holds is this replica's."""

    def node_index(self) -> NodeIndex:
        return NodeIndex()

    def facts_for(self, namespace: str) -> Facts:
        return Facts(namespace, {}, (), Usage(), {}, NodeIndex())


def test_eight_half_gpu_pods_fill_a_budget_of_4_through_holds_and_the_ninth_is_over() -> None:
    rules = compile_rules(RuleSet.model_validate(BUDGET_OF_4))
    holds = Reservations(ttl=60)
    source = ReservingFacts(_Source(), holds)  # type: ignore[arg-type]
    for i in range(9):
        pod = _kai(f"nb-{i}")
        decision = evaluate(subject_for(pod, namespace="ml"), rules, source.facts_for("ml"))
        if i < 8:
            assert decision.allowed, decision.message()
            assert decision.hold is not None
            assert decision.hold.gpus == {GPU: Fraction(1, 2)}
            holds.hold(decision.hold)
        else:
            assert not decision.allowed
            assert "uses 4 of 4 nvidia.com/gpu; this pod asks 0.5" in decision.message()


def test_gpu_memory_is_charged_as_its_share_of_the_smallest_gpu_it_may_get() -> None:
    nodes = NodeIndex(
        [
            Node(
                "l4", {"nvidia.com/gpu.product": "L4", "nvidia.com/gpu.memory": "23034"}, {GPU: 1}
            ),
            Node(
                "h100",
                {"nvidia.com/gpu.product": "H100", "nvidia.com/gpu.memory": "81559"},
                {GPU: 8},
            ),
        ]
    )
    facts = Facts("ml", {}, (), Usage(), {}, nodes)
    rules = compile_rules(RuleSet.model_validate(BUDGET_OF_4))
    pod = _kai("nb", **{"gpu-memory": "11517"})
    hold = evaluate(subject_for(pod, namespace="ml"), rules, facts).hold
    assert hold is not None
    assert hold.gpus == {GPU: Fraction(11517, 23034)}  # half an L4: it may land there
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "H100"}
    hold = evaluate(subject_for(pod, namespace="ml"), rules, facts).hold
    assert hold is not None
    assert hold.gpus == {GPU: Fraction(11517, 81559)}


# --- who keeps it -----------------------------------------------------------------------------


def test_rules_check_says_shares_are_the_webhook_s_alone(tmp_path: Path) -> None:
    (tmp_path / "budgets.yaml").write_text(yaml.safe_dump(BUDGET_OF_4))
    out = io.StringIO()
    assert check(tmp_path, out) == 0
    text = out.getvalue()
    assert "requests.nvidia.com/gpu=4 enforced by the apiserver" in text
    assert (
        "budget 'team': nvidia.com/gpu=4: the shares of pods given part of a GPU (gpu-fraction, "
        "gpu-memory) enforced by the webhook only (they are asked by annotation" in text
    )
    assert load_rules(tmp_path).rules.gpu_quota.budgets[0].limits == {GPU: 4}
