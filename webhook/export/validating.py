"""ValidatingAdmissionPolicies and their bindings for the rule set in force.

One policy per mode (enforce, warn, audit) judging every exported rule in that mode: the pod
specs are read once, and one message lists every finding, as the webhook's denial does (the
apiserver reports only the first failed validation of the first denying policy).
"""

from __future__ import annotations

from typing import Any

from webhook.engine.compiled import CompiledRules, CompiledRuleSet
from webhook.engine.decision import Mode
from webhook.export.scope import (
    API_VERSION,
    GROUP_SUFFIX,
    LABELS,
    RULES_ANNOTATION,
    SOURCE_ANNOTATION,
    LeftOut,
    exempt_conditions,
    match_constraints,
    namespace_selector,
    pod_variables,
    skipped,
)
from webhook.export.validations import EXPORTED, LEFT_OUT, ExportedRule

__all__ = ["SEPARATOR", "validating"]

_ACTIONS = {Mode.ENFORCE: "Deny", Mode.WARN: "Warn", Mode.AUDIT: "Audit"}
SEPARATOR = " | "  # a message expression may not contain a line break


def _findings(group: list[ExportedRule], compiled: CompiledRules) -> dict[str, str]:
    """Per pod spec, rule by rule, container by container: the engine's order."""
    per_rule = []
    for rule in group:
        found = f"p.cs.map(r, {rule.messages(compiled)}).flatten()"
        per_rule.append(f"(p.cs.exists(r, r.asks) ? {found} : [])" if rule.gpu_only else found)
    return {
        "name": "findings",
        "expression": "variables.pods.map(p,\n  " + "\n  + ".join(per_rule) + ").flatten()",
    }


def _source(group: list[ExportedRule], mode: Mode) -> str:
    return ", ".join(f"rules.{r.rule}.mode={mode}" for r in group)


def _policy(
    name: str, group: list[ExportedRule], rules: CompiledRuleSet, mode: Mode
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        # An object whose fields have types no Kubernetes object has there makes the CEL
        # fail; the webhook refuses it as unreadable, so the policy refuses it too.
        "failurePolicy": "Fail",
        "matchConstraints": match_constraints(rules.workloads),
    }
    conditions = exempt_conditions(rules)
    if conditions:
        spec["matchConditions"] = conditions
    spec["variables"] = [
        *pod_variables(rules),
        _findings(group, rules.base),
    ]
    spec["validations"] = [
        {
            "expression": "size(variables.findings) == 0",
            "messageExpression": f"variables.findings.join('{SEPARATOR}')",
            "reason": "Invalid",
        }
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            "name": name,
            "labels": dict(LABELS),
            "annotations": {
                RULES_ANNOTATION: ",".join(r.rule for r in group),
                SOURCE_ANNOTATION: _source(group, mode),
            },
        },
        "spec": spec,
    }


def validating(
    rules: CompiledRuleSet,
) -> tuple[list[dict[str, Any]], list[tuple[str, str]], list[LeftOut]]:
    """(objects, exported rules with what they check, rules left out with why)."""
    left: list[LeftOut] = []
    by_mode: dict[Mode, list[ExportedRule]] = {}
    for rule in EXPORTED:
        mode = rules.base.mode(rule.rule)
        why = skipped(rule.rule, rules, mode=mode)
        if why is not None:
            left.append(LeftOut(rule.rule, why))
        else:
            by_mode.setdefault(mode, []).append(rule)
    objects: list[dict[str, Any]] = []
    exported: list[tuple[str, str]] = []
    for mode, action in _ACTIONS.items():
        group = by_mode.get(mode)
        if not group:
            continue
        name = f"{action.lower()}.{GROUP_SUFFIX}"
        objects.append(_policy(name, group, rules, mode))
        objects.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {
                    "name": name,
                    "labels": dict(LABELS),
                    "annotations": {SOURCE_ANNOTATION: _source(group, mode)},
                },
                "spec": {
                    "policyName": name,
                    "validationActions": [action],
                    "matchResources": namespace_selector(rules),
                },
            }
        )
        exported += [(r.rule, r.why) for r in group]
    exported_ids = {r.rule for r in EXPORTED}
    left += [LeftOut(r, why) for r, why in LEFT_OUT.items() if r not in exported_ids]
    return objects, exported, left
