"""Which GPU budgets the apiserver can keep, and which stay the webhook's alone.

A webhook sees one request at a time, and each replica has its own memory: a budget it keeps
alone is approximate across replicas, and a forged review can hold it. The apiserver's
ResourceQuota admission is transactional and cannot be forged, but it is per namespace, counts
extended resources only under `requests.<name>` (a `limits.` entry is accepted and never
enforced), and counts DRA devices per DeviceClass as
`<class>.deviceclass.resource.k8s.io/devices`. So a budget over exactly one namespace becomes a
ResourceQuota for each resource it caps that way; the rest (budgets over several namespaces or
a selector, per-product caps, HAMi's per-GPU units) is the webhook's, and says why.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from webhook.namepatterns import is_pattern
from webhook.quantity import Amount, show
from webhook.ruleset.models import QuotaBudget, RuleSet

__all__ = [
    "DRA_QUOTA_SUFFIX",
    "BudgetPlan",
    "QuotasIn",
    "budget_plans",
    "disagreements",
    "quota_name",
]

DRA_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"
# HAMi's units are per GPU: a pod asking 2 GPUs of 4000 MiB holds 8000 MiB, which ResourceQuota
# (counting the request once) cannot multiply.
PER_GPU_UNITS = frozenset(
    {"nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage"}
)


@dataclass(frozen=True, slots=True)
class BudgetPlan:
    """How one budget is kept: `hard` is the ResourceQuota the apiserver enforces for it
    (empty: none), `webhook_only` what it caps that only the webhook can, with why."""

    budget: str
    namespace: str | None  # the one namespace, when the budget has exactly one
    quota: str | None  # the ResourceQuota's name, when there is one
    hard: dict[str, int] = field(default_factory=dict)
    webhook_only: tuple[tuple[str, str], ...] = ()

    def describe(self) -> list[str]:
        """One line per part, for `rules check` and `rules explain`."""
        lines = []
        if self.hard:
            keys = ", ".join(f"{k}={v}" for k, v in sorted(self.hard.items()))
            lines.append(
                f"budget {self.budget!r}: {keys} enforced by the apiserver (ResourceQuota "
                f"{self.quota} in {self.namespace}, written by `gpu-admission export`)"
            )
        for what, why in self.webhook_only:
            lines.append(f"budget {self.budget!r}: {what} enforced by the webhook only ({why})")
        return lines


def quota_name(budget: str) -> str:
    """A DNS-1123 name for the budget's ResourceQuota, stable across exports and distinct for
    distinct budget names (a hash of the name ends it: "ML team" and "ml_team" differ)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", budget.lower()).strip("-")[:40].strip("-") or "budget"
    return f"gpu-admission-{slug}-{hashlib.sha256(budget.encode()).hexdigest()[:8]}"


def _plan(budget: QuotaBudget, shared: str = "") -> BudgetPlan:
    caps = [(f"{r}={n}", r) for r, n in sorted(budget.limits.items())]
    # Shares of a GPU given by annotation (KAI/Run:ai) count toward the resource they are part
    # of; no pod asks them as a resource, so no ResourceQuota sees them.
    shares = [
        (
            f"{c}: the shares of pods given part of a GPU (gpu-fraction, gpu-memory)",
            "they are asked by annotation, not as a resource a ResourceQuota can count",
        )
        for c, r in caps
        if r == shared
    ]
    products = [
        (f"{product}: {r}={n}", "a per-product cap is a node label, not a resource name")
        for product, per in sorted(budget.products.items())
        for r, n in sorted(per.items())
    ]
    single = (
        len(budget.namespaces) == 1
        and not is_pattern(budget.namespaces[0])
        and budget.namespace_selector is None
    )
    if not single:
        why = "it spans several namespaces or a selector; a ResourceQuota holds one namespace"
        return BudgetPlan(
            budget.name, None, None, {}, (*((c, why) for c, _ in caps), *products, *shares)
        )
    namespace = budget.namespaces[0]
    hard: dict[str, int] = {}
    rest: list[tuple[str, str]] = []
    for cap, resource in caps:
        if is_pattern(resource):
            rest.append((cap, "a pattern names no one resource a quota can count"))
        elif resource in PER_GPU_UNITS:
            rest.append((cap, "a per-GPU unit, which ResourceQuota would count once per pod"))
        elif resource.endswith(DRA_QUOTA_SUFFIX):
            hard[resource] = budget.limits[resource]  # DRA devices of one class (1.34+)
        else:
            hard[f"requests.{resource}"] = budget.limits[resource]
    quota = quota_name(budget.name) if hard else None
    return BudgetPlan(budget.name, namespace, quota, hard, (*rest, *products, *shares))


def budget_plans(rules: RuleSet) -> list[BudgetPlan]:
    """Each budget of the base rules, and how it is kept. Budgets an override sets are the
    webhook's: which namespaces they reach depends on the override's selection."""
    shared = rules.gpu_sharing.resource
    plans = [_plan(b, shared) for b in rules.rules.gpu_quota.budgets]
    for override in rules.overrides:
        for budget in override.rules.get("gpu-quota", {}).get("budgets", []) or []:
            name = budget.get("name", "?") if isinstance(budget, dict) else "?"
            plans.append(
                BudgetPlan(
                    str(name),
                    None,
                    None,
                    {},
                    (("all of it", f"set in override {override.name!r}"),),
                )
            )
    return plans


QuotasIn = Callable[[str], Sequence[tuple[str, Mapping[str, Amount]]]]


def disagreements(plans: list[BudgetPlan], quotas_in: QuotasIn) -> list[str]:
    """Where a budget and the cluster's ResourceQuotas (`quotas_in(namespace)`: each one's
    name and hard caps) say different things about the same key. The smaller is what holds
    and what the webhook explains; the other is a number nobody will ever reach, so each is
    worth a line. A key no quota caps yet is said too: `export` writes it, and until it is
    applied the webhook keeps the budget alone."""
    out = []
    for plan in plans:
        if plan.namespace is None:
            continue
        present = quotas_in(plan.namespace)
        for key, limit in sorted(plan.hard.items()):
            caps = [(name, hard[key]) for name, hard in present if key in hard]
            if not caps:
                out.append(
                    f"budget {plan.budget!r}: no ResourceQuota in {plan.namespace} caps {key} "
                    f"yet; apply ResourceQuota {plan.quota} (`gpu-admission export`) so the "
                    "apiserver keeps it across replicas"
                )
                continue
            for name, hard in caps:
                if hard == limit:
                    continue
                smaller = "the ResourceQuota's" if hard < limit else "the budget's"
                out.append(
                    f"budget {plan.budget!r} allows {key}={limit} in {plan.namespace}, "
                    f"ResourceQuota {name} allows {show(hard)}: {smaller} "
                    f"{show(min(hard, limit))} is what holds and what the webhook explains; "
                    "make them agree (change the budget, or re-export and apply the quota)"
                )
    return out
