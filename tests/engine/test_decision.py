"""How findings combine into one decision: precedence, advisory findings, caps, holds.

The one place the webhook, the audit and the rules tests get their verdicts from (kopf keeps
the same kind of test for its `build_response`).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from webhook.engine.decision import MAX_WARNINGS, Decision, Mode, Verdict, combine, unreadable
from webhook.engine.findings import WARNING_LIMIT, Finding
from webhook.facts.model import PodGpus


def finding(rule: str, *, advisory: bool = False, summary: str = "") -> Finding:
    return Finding(
        rule=rule,
        summary=summary or f'{rule}: container "main" is wrong',
        fix="change it",
        field="spec.containers[0]",
        advisory=advisory,
    )


HOLD = PodGpus("ml-team", "train-", "Pending", {"nvidia.com/gpu": Fraction(1)})


@pytest.mark.parametrize(
    ("rule_mode", "ceiling", "expected"),
    [
        (Mode.ENFORCE, Mode.ENFORCE, Mode.ENFORCE),
        (Mode.ENFORCE, Mode.WARN, Mode.WARN),
        (Mode.ENFORCE, Mode.AUDIT, Mode.AUDIT),
        (Mode.WARN, Mode.AUDIT, Mode.AUDIT),
        (Mode.AUDIT, Mode.ENFORCE, Mode.AUDIT),
        (Mode.WARN, Mode.ENFORCE, Mode.WARN),
        (Mode.ENFORCE, Mode.OFF, Mode.OFF),
        (Mode.OFF, Mode.ENFORCE, Mode.OFF),
    ],
)
def test_the_global_mode_is_a_ceiling_on_each_rule(
    rule_mode: Mode, ceiling: Mode, expected: Mode
) -> None:
    assert rule_mode.under(ceiling) is expected


def test_deny_beats_warn_beats_audit_per_rule_in_the_annotations() -> None:
    decision = combine(
        [
            (finding("gpu-quota"), Mode.AUDIT),
            (finding("gpu-quota"), Mode.ENFORCE),
            (finding("gpu-memory-limit"), Mode.AUDIT),
            (finding("gpu-memory-limit"), Mode.WARN),
            (finding("gpu-readiness-probe"), Mode.AUDIT),
        ]
    )
    assert decision.annotations() == {
        "gpu-quota": "deny",
        "gpu-memory-limit": "warn",
        "gpu-readiness-probe": "audit",
    }
    assert not decision.allowed


def test_one_enforced_finding_denies_and_only_it_is_in_the_message() -> None:
    decision = combine([(finding("gpu-quota"), Mode.ENFORCE), (finding("x"), Mode.WARN)])
    assert not decision.allowed
    assert decision.message() == 'gpu-quota: container "main" is wrong. Fix: change it'
    assert [f.rule for f in decision.warnings] == ["x"]


def test_advisory_findings_never_deny_they_warn() -> None:
    decision = combine([(finding("gpu-quota", advisory=True), Mode.ENFORCE)])
    assert decision.allowed
    assert [j.mode for j in decision.judged] == [Mode.WARN]
    assert decision.annotations() == {"gpu-quota": "warn"}


def test_advisory_findings_keep_a_weaker_mode() -> None:
    decision = combine([(finding("gpu-quota", advisory=True), Mode.AUDIT)])
    assert [j.verdict for j in decision.judged] == [Verdict.AUDIT]
    assert decision.allowed and decision.warning_lines() == []


def test_findings_of_rules_that_are_off_are_dropped() -> None:
    decision = combine([(finding("gpu-quota"), Mode.OFF)])
    assert decision.judged == () and decision.allowed


def test_warnings_are_capped_with_a_count_of_the_rest() -> None:
    decision = combine([(finding(f"rule-{i}"), Mode.WARN) for i in range(9)])
    lines = decision.warning_lines()
    assert len(lines) == MAX_WARNINGS
    assert lines[-1] == "gpu-admission: 5 more warnings not shown"
    assert all(len(line) <= WARNING_LIMIT for line in lines)


def test_a_long_warning_is_cut_to_the_limit() -> None:
    long = finding("gpu-shm", summary="gpu-shm: " + "x" * 300)
    (line,) = combine([(long, Mode.WARN)]).warning_lines()
    assert len(line) == WARNING_LIMIT and line.endswith("…")


def test_an_allowed_pod_keeps_its_hold_and_a_denied_one_holds_nothing() -> None:
    assert combine([(finding("x"), Mode.WARN)], hold=HOLD).hold == HOLD
    assert combine([(finding("x"), Mode.ENFORCE)], hold=HOLD).hold is None


def test_an_unreadable_object_is_refused_and_names_the_field() -> None:
    decision = unreadable("Pod", "spec.containers[0].resources", "expected an object, found str")
    assert not decision.allowed
    assert decision.unreadable is not None
    assert decision.unreadable.message() == (
        "cannot read the Pod: spec.containers[0].resources: expected an object, found str"
    )


def test_a_decision_with_nothing_in_it_allows_untouched() -> None:
    decision = Decision()
    assert decision.allowed and decision.patch == () and decision.annotations() == {}
