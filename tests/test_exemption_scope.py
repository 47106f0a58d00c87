"""Exemptions a tenant cannot claim: what each kind relaxes follows from who can satisfy it
(golden cases `exempt-*` show whole objects)."""

from __future__ import annotations

from typing import Any

from webhook.engine.checks import MUTATIONS, VALIDATIONS
from webhook.engine.checks.isolation import ISOLATION_RULES
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import evaluate
from webhook.engine.subject import subject_for
from webhook.facts.model import PodGpus
from webhook.facts.static import StaticSnapshot
from webhook.ruleset import relaxing
from webhook.ruleset.models import RuleSet


def _rules(**top: Any) -> Any:
    return compile_rules(RuleSet.model_validate(top))


def _facts(namespace: str = "ml-team", pods: tuple[PodGpus, ...] = ()) -> Any:
    snap = StaticSnapshot(
        namespaces={namespace: {}}, nodes=[], quotas=[], priority_classes=[], pods=pods
    )
    return snap.facts_for(namespace)


def _pod(labels: dict[str, str], gpus: int = 4, account: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "cuda",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ]
    }
    if account:
        spec["serviceAccountName"] = account
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": labels},
        "spec": spec,
    }


def test_every_rule_is_in_exactly_one_group() -> None:
    """A new rule must say who may relax it."""
    groups = (relaxing.ISOLATION_RULES, relaxing.SHARED_RULES, relaxing.OWN_RULES)
    every = {v.rule for v in VALIDATIONS} | {m.rule for m in MUTATIONS}
    listed = [r for g in groups for r in g]
    assert sorted(listed) == sorted(every)
    assert set(relaxing.ISOLATION_RULES) == ISOLATION_RULES


def test_a_label_exemption_keeps_the_hold_and_the_quota() -> None:
    """The pod's own labels never take it out of the budget: it is charged (holds) like any."""
    rules = _rules(exemptions={"podSelector": {"matchLabels": {"tier": "system"}}})
    decision = evaluate(subject_for(_pod({"tier": "system"}), namespace="ml-team"), rules, _facts())
    assert decision.hold is not None
    assert dict(decision.hold.gpus) == {"nvidia.com/gpu": 4}


def test_a_label_exemption_relaxes_only_the_pods_own_rules() -> None:
    rules = _rules(
        exemptions={"podSelector": {"matchLabels": {"tier": "system"}}},
        rules={"gpu-memory-limit": {"mode": "enforce"}},
    )
    labelled = evaluate(subject_for(_pod({"tier": "system"}), namespace="ml-team"), rules, _facts())
    plain = evaluate(subject_for(_pod({}), namespace="ml-team"), rules, _facts())
    assert "gpu-memory-limit" in {j.finding.rule for j in plain.judged}
    assert "gpu-memory-limit" not in {j.finding.rule for j in labelled.judged}
    assert labelled.patch == ()  # no toleration or /dev/shm: only the pod's author pays
    assert plain.patch != ()


def test_every_exported_rule_is_one_a_label_may_relax() -> None:
    """The native policies test `podSelector` against every exported rule at once: that is
    right only while each of them is one a label relaxes."""
    from webhook.export import mutating
    from webhook.export.validations import EXPORTED

    exported = {r.rule for r in EXPORTED} | {m.rule for m in mutating._MUTATIONS}
    assert exported <= relaxing.BY_LABEL
