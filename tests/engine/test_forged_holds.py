"""A forged review cannot hold a budget the apiserver enforces: with a ResourceQuota on the
resource, the webhook still judges early but counts no holds for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.facts.reservations import Reservations, ReservingFacts
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules

BUDGET = """\
rules:
  gpu-quota:
    budgets:
      - {name: ml-team, namespaces: [ml-team], limits: {nvidia.com/gpu: 4}}
"""


def _pod(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-team"},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ]
        },
    }


def _cluster(tmp_path: Path, quota: bool, hard: int = 4) -> ReservingFacts:
    snapshot: dict[str, Any] = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "namespaces": {"ml-team": {"labels": {}}},
    }
    if quota:
        snapshot["resourceQuotas"] = [
            {"namespace": "ml-team", "name": "gpu", "hard": {"requests.nvidia.com/gpu": str(hard)}}
        ]
    path = tmp_path / f"cluster-{quota}-{hard}.yaml"
    path.write_text(yaml.safe_dump(snapshot))
    return ReservingFacts(load_snapshot(path), Reservations(ttl=30))


def _decide(source: ReservingFacts, tmp_path: Path, pod: dict[str, Any]) -> Any:
    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "rules" / "budget.yaml").write_text(BUDGET)
    rules = compile_rules(load_rules(tmp_path / "rules"))
    subject = subject_for(pod, namespace="ml-team")
    return evaluate(subject, rules, source.facts_for("ml-team"), stage=Stage.VALIDATE)


def _forge(source: ReservingFacts, tmp_path: Path) -> None:
    """A review of a 4-GPU pod that will never be created: admitted, so it holds."""
    decision = _decide(source, tmp_path, _pod("never-created", 4))
    assert decision.allowed and decision.hold is not None
    source.reservations.hold(decision.hold)


def test_a_forged_review_never_denies_a_real_pod_where_a_resource_quota_holds_the_line(
    tmp_path: Path,
) -> None:
    source = _cluster(tmp_path, quota=True)
    _forge(source, tmp_path)
    assert _decide(source, tmp_path, _pod("real", 1)).allowed


def test_without_a_resource_quota_the_hold_still_counts(tmp_path: Path) -> None:
    """Webhook-only budgets keep their holds: concurrent creates on one replica stay bounded."""
    source = _cluster(tmp_path, quota=False)
    _forge(source, tmp_path)
    decision = _decide(source, tmp_path, _pod("real", 1))
    assert not decision.allowed and "gpu-quota" in {f.rule for f in decision.denials}


def test_a_resource_quota_looser_than_the_budget_does_not_keep_it_so_holds_count(
    tmp_path: Path,
) -> None:
    """A quota of 16 lets the apiserver admit what a budget of 4 refuses: the budget is the
    webhook's to keep, with its holds, as if there were no quota."""
    source = _cluster(tmp_path, quota=True, hard=16)
    _forge(source, tmp_path)
    decision = _decide(source, tmp_path, _pod("real", 1))
    assert not decision.allowed
    assert any("uses 4 of 4" in f.summary for f in decision.denials)
