"""Modes, shadow mode, exemptions and per-namespace overrides, end to end over HTTPS."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.pods import VIOLATION
from tests.support.webhook import Webhook


@pytest.mark.parametrize(
    "mode,allowed,warned,annotation",
    [
        ("enforce", False, set(), "deny"),
        ("warn", True, {"privileged-gpu"}, "warn"),
        ("audit", True, set(), "audit"),
        ("off", True, set(), None),
    ],
)
def test_one_violation_under_each_mode(
    webhook_with: Any, mode: str, allowed: bool, warned: set[str], annotation: str | None
) -> None:
    hook: Webhook = webhook_with({"privileged-gpu": {"mode": mode}})
    verdict = hook.validate(VIOLATION)
    assert verdict.allowed is allowed
    assert verdict.warned_rules == warned
    assert (verdict.raw.get("auditAnnotations") or {}).get("privileged-gpu") == annotation
    if not allowed:
        assert verdict.message.startswith("privileged-gpu: ")


def test_shadow_mode_changes_nothing_and_records_everything(webhook_with: Any) -> None:
    hook: Webhook = webhook_with({}, mode="audit")
    mutation = hook.mutate(VIOLATION)
    verdict = hook.validate(VIOLATION)
    assert mutation.patch == []
    assert verdict.allowed and verdict.warnings == []
    assert verdict.raw["auditAnnotations"] == {"privileged-gpu": "audit"}


def test_global_warn_mode_denies_nothing_but_still_mutates(webhook_with: Any) -> None:
    hook: Webhook = webhook_with({}, mode="warn")
    assert hook.mutate(VIOLATION).patch != []
    verdict = hook.validate(VIOLATION)
    assert verdict.allowed
    assert verdict.warned_rules == {"privileged-gpu"}


@pytest.mark.parametrize(
    "exemptions",
    [
        {"serviceAccounts": ["ml-team/trainer"]},
        {"serviceAccounts": ["ml-*/*"]},
        {"namespaces": ["ml-*"]},
    ],
    ids=["service account", "service account pattern", "namespace pattern"],
)
def test_exempt_pods_are_neither_changed_nor_judged(
    webhook_with: Any, exemptions: dict[str, Any]
) -> None:
    hook: Webhook = webhook_with({}, exemptions=exemptions)
    assert hook.mutate(VIOLATION).patch == []
    assert hook.validate(VIOLATION).allowed
    other_namespace = hook.validate(VIOLATION, namespace="web")
    if "namespaces" in exemptions or "serviceAccounts" in exemptions:
        assert not other_namespace.allowed


def test_a_pod_label_exemption_spares_the_other_rules_but_never_gpu_access(
    webhook_with: Any,
) -> None:
    """The pod's author sets its labels: they must not switch the GPU-access rules off."""
    hook: Webhook = webhook_with(
        {}, exemptions={"podSelector": {"matchLabels": {"app": "trainer"}}}
    )
    assert hook.mutate(VIOLATION).patch == []  # no toleration, /dev/shm or probe changes
    verdict = hook.validate(VIOLATION)
    assert not verdict.allowed
    assert verdict.denied_rules == {"privileged-gpu"}
    unlabelled = {**VIOLATION, "metadata": {"name": "trainer-0", "labels": {}}}
    assert hook.mutate(unlabelled).patch != []  # without the label, the usual mutations


def test_an_override_changes_settings_in_its_namespaces_only(webhook_with: Any) -> None:
    hook: Webhook = webhook_with(
        {},
        overrides=[
            {
                "name": "research",
                "namespaces": ["research-*"],
                "rules": {"privileged-gpu": {"mode": "warn"}, "gpu-shm": {"maxSize": "2Gi"}},
            },
            {
                "name": "research-lab",
                "namespaces": ["research-lab"],
                "rules": {"privileged-gpu": {"mode": "enforce"}},
            },
        ],
    )
    assert not hook.validate(VIOLATION, namespace="ml-team").allowed
    assert hook.validate(VIOLATION, namespace="research-1").allowed
    assert not hook.validate(VIOLATION, namespace="research-lab").allowed  # exact name wins

    mutated = hook.mutate(VIOLATION, namespace="research-1").apply(VIOLATION)
    assert mutated["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "2Gi"
    default = hook.mutate(VIOLATION, namespace="ml-team").apply(VIOLATION)
    assert default["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "4Gi"
