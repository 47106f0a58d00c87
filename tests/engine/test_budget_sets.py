"""Budgets over several namespaces cap what the whole set holds at once: the usage and this
replica's holds of every namespace the budget selects (names, patterns, labels) add up, and a
denial says how much each namespace holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fake_apiserver import FakeApiServer
from tests.support.live import eventually, live_cache
from webhook.engine.compiled import CompiledRuleSet, compile_rules
from webhook.engine.decision import Decision
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.facts.reservations import Reservations, ReservingFacts
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules

GPU = "nvidia.com/gpu"
NAMESPACES = {
    "ml-team": {"team": "ml"},
    "ml-team-a": {"team": "ml"},
    "ml-team-b": {"team": "ml"},
    "research": {"team": "research"},
}


def pod(name: str, namespace: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}]
        },
    }


def rules(tmp_path: Path, budgets: list[dict[str, Any]], **more: Any) -> CompiledRuleSet:
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    doc = {"rules": {"gpu-quota": {"budgets": budgets}}, **more}
    (folder / "rules.yaml").write_text(yaml.safe_dump(doc))
    return compile_rules(load_rules(folder))


def cluster(
    tmp_path: Path, used: dict[str, int], quotas: list[Any] | None = None
) -> ReservingFacts:
    """A cluster with one running pod per namespace in `used`, holding that many GPUs (a
    namespace `NAMESPACES` does not name is labelled team=ml)."""
    labels = {**{ns: {"team": "ml"} for ns in used}, **NAMESPACES}
    snapshot = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "namespaces": {ns: {"labels": labels} for ns, labels in labels.items()},
        "resourceQuotas": quotas or [],
        "pods": [
            {"namespace": ns, "name": f"running-{ns}", "gpus": {GPU: n}} for ns, n in used.items()
        ],
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(snapshot))
    return ReservingFacts(load_snapshot(path), Reservations(ttl=30))


def review(source: ReservingFacts, compiled: CompiledRuleSet, obj: dict[str, Any]) -> Decision:
    """/validate as the server runs it: judged, and an admitted pod's GPUs held."""
    namespace = obj["metadata"]["namespace"]
    subject = subject_for(obj, namespace=namespace)
    decision = evaluate(subject, compiled, source.facts_for(namespace), stage=Stage.VALIDATE)
    if decision.hold is not None:
        source.reservations.hold(decision.hold)
    return decision


def quota_denials(decision: Decision) -> list[str]:
    return [f.summary for f in decision.denials if f.rule == "gpu-quota"]


SET = {"name": "ml", "namespaces": ["ml-team", "ml-team-*"], "limits": {GPU: 16}}


def test_a_full_namespace_leaves_nothing_for_the_others_of_its_set(tmp_path: Path) -> None:
    source = cluster(tmp_path, {"ml-team": 16})
    decision = review(source, rules(tmp_path, [SET]), pod("more", "ml-team-b", 8))
    assert not decision.allowed
    (summary,) = quota_denials(decision)
    assert "together and they use 16 (ml-team 16 + ml-team-b 0); this pod asks 8" in summary


def test_a_burst_across_the_namespaces_of_a_set_is_held_to_the_set(tmp_path: Path) -> None:
    """Creates racing in two namespaces of the set, faster than any watch: each admitted
    pod's hold counts for the whole set, so the set never holds more than its budget."""
    source = cluster(tmp_path, {"ml-team": 8, "research": 8})
    compiled = rules(tmp_path, [SET])
    admitted = [
        i
        for i in range(8)
        if review(source, compiled, pod(f"burst-{i}", f"ml-team-{'ab'[i % 2]}", 4)).allowed
    ]
    assert admitted == [0, 1]  # 8 running + 4 + 4 = 16
    late = review(source, compiled, pod("late", "ml-team", 1))
    assert not late.allowed
    (summary,) = quota_denials(late)
    assert "use 16 (ml-team 8 + ml-team-a 4 + ml-team-b 4)" in summary


def test_a_namespace_selector_sums_every_namespace_it_selects(tmp_path: Path) -> None:
    budget = {"name": "team-ml", "namespaceSelector": {"matchLabels": {"team": "ml"}}}
    source = cluster(tmp_path, {"ml-team": 6, "ml-team-a": 2, "research": 8})
    compiled = rules(tmp_path, [{**budget, "limits": {GPU: 12}}])
    assert review(source, compiled, pod("a", "ml-team-b", 4)).allowed  # 6 + 2 + 4
    denied = review(source, compiled, pod("b", "ml-team-a", 1))
    assert not denied.allowed
    assert "use 12 (ml-team 6 + ml-team-b 4 + ml-team-a 2)" in quota_denials(denied)[0]


def test_holds_outside_the_set_count_nothing_for_it(tmp_path: Path) -> None:
    source = cluster(tmp_path, {"ml-team": 12})
    compiled = rules(tmp_path, [SET, {"name": "r", "namespaces": ["research"], "limits": {GPU: 8}}])
    assert review(source, compiled, pod("r", "research", 8)).allowed
    assert review(source, compiled, pod("fits", "ml-team-a", 4)).allowed  # 12 + 4


def test_a_resource_quota_in_one_namespace_does_not_keep_a_budget_over_several(
    tmp_path: Path,
) -> None:
    """A ResourceQuota caps one namespace; the set's total is the webhook's to keep, so the
    holds of every namespace count, even those a quota in their namespace caps."""
    quota = {"namespace": "ml-team-a", "name": "gpu", "hard": {f"requests.{GPU}": "8"}}
    source = cluster(tmp_path, {"ml-team": 8}, quotas=[quota])
    compiled = rules(tmp_path, [SET])
    assert review(source, compiled, pod("a-0", "ml-team-a", 8)).allowed
    denied = review(source, compiled, pod("b-0", "ml-team-b", 1))
    assert not denied.allowed
    assert "use 16 (ml-team 8 + ml-team-a 8 + ml-team-b 0)" in quota_denials(denied)[0]


def test_an_override_budget_counts_only_the_namespaces_the_override_reaches(
    tmp_path: Path,
) -> None:
    """A budget set in an override is in force only where the override applies: a namespace
    its own patterns name but the override does not reach is outside its set."""
    budget = {"name": "ml-a", "namespaces": ["ml-team*"], "limits": {GPU: 8}}
    overrides = [
        {
            "name": "a-only",
            "namespaces": ["ml-team", "ml-team-a"],
            "rules": {"gpu-quota": {"budgets": [budget]}},
        },
    ]
    source = cluster(tmp_path, {"ml-team": 4, "ml-team-b": 16})
    compiled = rules(tmp_path, [], overrides=overrides)
    assert review(source, compiled, pod("a", "ml-team-a", 4)).allowed  # ml-team-b is not in
    denied = review(source, compiled, pod("b", "ml-team", 1))
    assert "use 8 (ml-team 4 + ml-team-a 4)" in quota_denials(denied)[0]


@pytest.mark.parametrize("many", [3, 12])
def test_a_denial_names_the_namespaces_that_hold_the_most(tmp_path: Path, many: int) -> None:
    """The arithmetic over the set, short: the biggest holders and the pod's own namespace
    by name, the rest as one sum."""
    used = {f"ml-team-{i:02}": 2 for i in range(many)}
    source = cluster(tmp_path, {"ml-team": 4, **used})
    budget = {**SET, "limits": {GPU: 4 + 2 * many}}
    denied = review(source, rules(tmp_path, [budget]), pod("x", "ml-team-b", 1))
    (summary,) = quota_denials(denied)
    assert f"they use {4 + 2 * many} (ml-team 4 + " in summary
    assert summary.count(" + ") <= 7
    assert "ml-team-b 0" in summary
    if many > 4:  # five by name, the pod's own, the rest summed
        assert f"{many - 4} more namespaces {2 * (many - 4)}" in summary


def test_the_live_cache_sums_the_set_from_its_watch(tmp_path: Path) -> None:
    """The webhook's own source: pods the watch shows in another namespace of the set, and
    this replica's holds there, count for a pod judged in a third."""
    server = FakeApiServer()
    server.start()
    try:
        for ns in ("ml-team", "ml-team-a", "ml-team-b"):
            server.put("namespaces", {"metadata": {"name": ns, "labels": {"team": "ml"}}})
        running = pod("running", "ml-team", 8)
        server.put("pods", {**running, "status": {"phase": "Running"}})
        holds = Reservations(ttl=30)
        live = live_cache(server, reservations=holds)
        live.start()
        try:
            assert live.wait_synced(10)
            eventually(lambda: live.pod_count == 1)
            source = ReservingFacts(live, holds)
            compiled = rules(tmp_path, [SET])
            assert review(source, compiled, pod("a", "ml-team-a", 4)).allowed
            late = review(source, compiled, pod("b", "ml-team-b", 8))
            assert "use 12 (ml-team 8 + ml-team-a 4 + ml-team-b 0)" in quota_denials(late)[0]
        finally:
            live.stop()
    finally:
        server.stop()
