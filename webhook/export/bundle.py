"""Everything one export writes for a rule set and a Kubernetes version."""

from __future__ import annotations

from webhook.engine.checks import MUTATIONS
from webhook.engine.compiled import CompiledRuleSet
from webhook.export.mutating import mutating
from webhook.export.quotas import resource_quotas
from webhook.export.scope import Export, LeftOut
from webhook.export.validating import validating
from webhook.ruleset.quotas import budget_plans

__all__ = ["MUTATING_SINCE", "VALIDATING_SINCE", "build"]

# MutatingAdmissionPolicy is admissionregistration.k8s.io/v1 (GA) since Kubernetes 1.36.
MUTATING_SINCE = (1, 36)
# The policies' CEL uses cel-go's lists extension (lists.range, flatten, sort), in Kubernetes'
# CEL since 1.34. But an apiserver compiles a new expression with the previous minor's
# environment (its compatibility version, so a rollback can still run what it stored): a 1.34
# apiserver refuses these policies ("undeclared reference to 'lists'"), 1.35 accepts them.
VALIDATING_SINCE = (1, 35)
MUTATION_RULES = tuple(m.rule for m in MUTATIONS)


def build(rules: CompiledRuleSet, kubernetes: tuple[int, int] = MUTATING_SINCE) -> Export:
    objects, checked, left = validating(rules)
    exported = [(rule, "validation", what) for rule, what in checked]
    if kubernetes < VALIDATING_SINCE:
        version = ".".join(map(str, VALIDATING_SINCE))
        why = f"the policies' CEL (lists extension) is accepted from Kubernetes {version}"
        left += [LeftOut(rule, why, "validation") for rule in dict.fromkeys(r for r, _ in checked)]
        objects, exported = [], []
    if kubernetes >= MUTATING_SINCE:
        more, done, rest = mutating(rules)
        objects += more
        exported += [(rule, "mutation", what) for rule, what in done]
        left += rest
    else:
        version = ".".join(map(str, MUTATING_SINCE))
        why = f"MutatingAdmissionPolicy v1 needs Kubernetes {version}"
        left += [LeftOut(rule, why, "mutation") for rule in MUTATION_RULES]
    # Budgets: what the apiserver can count becomes a ResourceQuota, the rest stays ours.
    objects += resource_quotas(rules.source)
    for plan in budget_plans(rules.source):
        if plan.hard:
            keys = ", ".join(f"{k}={v}" for k, v in sorted(plan.hard.items()))
            where = f"ResourceQuota {plan.quota} in {plan.namespace}"
            exported.append(("gpu-quota", "quota", f"budget {plan.budget!r}: {keys} ({where})"))
        left += [
            LeftOut("gpu-quota", f"budget {plan.budget!r}: {what}: {why}", "quota")
            for what, why in plan.webhook_only
        ]
    return Export(tuple(objects), tuple(exported), tuple(left))
