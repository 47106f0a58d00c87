"""Clusters whose GPU nodes carry no GPU taint: a privileged pod that asks for no GPU and
tolerates no GPU taint lands on them. Fresh facts decide (goldens `access-untainted-*`,
`access-privileged-daemonset-tainted-gpu-nodes-allowed`); facts too old to trust fall to
privileged-gpu's whenUnknown, unless even they show such a node."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT
from webhook.engine.compiled import compile_rules
from webhook.engine.decision import Decision
from webhook.engine.pipeline import evaluate
from webhook.engine.subject import subject_for
from webhook.facts.model import Facts
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules

GOLDEN = ROOT / "tests" / "golden"
RULES = load_rules(ROOT / "rules")
DAEMONSET = yaml.safe_load(
    (GOLDEN / "access-untainted-gpu-nodes-privileged-daemonset-denied" / "input.yaml").read_text()
)
UNTAINTED = load_snapshot(
    GOLDEN / "access-untainted-gpu-nodes-every-pod-gets-void" / "cluster.yaml"
)
TAINTED = load_snapshot(
    GOLDEN / "access-privileged-daemonset-tainted-gpu-nodes-allowed" / "cluster.yaml"
)
STALE = 10_000.0  # seconds; the rule set allows far less


def _facts(snapshot: Any, age: float | None) -> Facts:
    facts: Facts = snapshot.facts_for("default")
    facts.age_seconds = age
    return facts


def _decide(facts: Facts | None, when_unknown: str = "allow") -> Decision:
    rules = RULES.model_copy(
        update={
            "rules": RULES.rules.model_copy(
                update={
                    "privileged_gpu": RULES.rules.privileged_gpu.model_copy(
                        update={"when_unknown": when_unknown}
                    )
                }
            )
        }
    )
    subject = subject_for(copy.deepcopy(DAEMONSET), namespace="default")
    return evaluate(subject, compile_rules(rules), facts)


def _rules(findings: Any) -> set[str]:
    return {f.rule for f in findings}


@pytest.mark.parametrize("age", [None, 1.0, STALE])
def test_facts_that_show_an_untainted_gpu_node_deny_whatever_their_age(age: float | None) -> None:
    """GPU nodes do not lose their GPUs between two watches: old facts that show one decide."""
    decision = _decide(_facts(UNTAINTED, age))
    assert _rules(decision.denials) == {"privileged-gpu"}
    assert "not checked" not in decision.message()


def test_fresh_facts_of_tainted_gpu_nodes_admit_it_silently() -> None:
    decision = _decide(_facts(TAINTED, 1.0))
    assert decision.allowed and not decision.warnings


def test_stale_facts_of_tainted_gpu_nodes_warn_by_default() -> None:
    decision = _decide(_facts(TAINTED, STALE))
    assert decision.allowed
    (warning,) = [f for f in decision.warnings if f.rule == "privileged-gpu"]
    assert "not checked" in warning.summary and 'container "tuner"' in warning.summary
    assert "untainted GPU nodes are not known" in warning.summary
    assert warning.field == "spec.template.spec.containers[0].securityContext.privileged"


def test_stale_facts_of_tainted_gpu_nodes_deny_under_when_unknown_deny() -> None:
    decision = _decide(_facts(TAINTED, STALE), when_unknown="deny")
    assert _rules(decision.denials) == {"privileged-gpu"}
    assert "whenUnknown: deny" in decision.message()


def test_facts_never_read_are_unknown_too() -> None:
    """A live cache before its first list says infinitely old."""
    decision = _decide(_facts(TAINTED, float("inf")), when_unknown="deny")
    assert "cluster facts are not read yet" in decision.message()


def test_no_facts_at_all_take_gpu_nodes_as_tainted() -> None:
    """An offline audit: GPU nodes carry the GPU taints (documented), nothing to say."""
    decision = _decide(None, when_unknown="deny")
    assert decision.allowed and not decision.warnings
