"""Namespace GPU budgets and native ResourceQuota: say early and plainly what will be refused.

A budget's product caps follow the pod to every product it could land on (`pod_products`),
not just the one it names: otherwise `NotIn`, an instance type or no selector at all would
walk past the cap onto the capped product.

DRA devices count per DeviceClass under ResourceQuota's key,
`<class>.deviceclass.resource.k8s.io/devices`: the GPU devices of claims the pod's templates
will make (`claims.new_devices`; a ResourceClaim it names exists and is counted already). A
budget may name that key; its usage is what the namespace's ResourceClaims take.
"""

from __future__ import annotations

from collections.abc import Iterator

from webhook.engine import claims
from webhook.engine.accounting import budget_gpus, pod_gpus, pod_products
from webhook.engine.checks.budgetsets import SetUsage, describe_set, set_usage, spans_several
from webhook.engine.checks.quotafixes import already_over, budget_fix, devices_fix
from webhook.engine.checks.trust import trusted_facts, unknown_facts
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import PodView
from webhook.engine.totals import Totals
from webhook.facts.dra import DraFacts
from webhook.facts.model import GPU_PRODUCT_LABEL, Facts, NodeIndex, Quota, Usage
from webhook.facts.nodematch import Placement
from webhook.facts.quotascopes import describe as describe_scopes
from webhook.namepatterns import NamePatterns
from webhook.quantity import Amount, show
from webhook.ruleset.models import QuotaBudget, RuleSettings

__all__ = ["gpu_quota", "matching_budgets", "prepare"]

RULE = "gpu-quota"


def prepare(settings: RuleSettings) -> tuple[tuple[QuotaBudget, NamePatterns | None], ...]:
    """gpu-quota's budgets, each with its namespace patterns compiled (None: every namespace)."""
    return tuple(
        (b, NamePatterns(b.namespaces) if b.namespaces else None)
        for b in settings.gpu_quota.budgets
    )


def matching_budgets(ctx: Context, facts: Facts) -> list[tuple[QuotaBudget, NamePatterns | None]]:
    """The budgets whose set holds the pod's namespace, each with its compiled names."""
    labels = facts.namespace_labels
    out = []
    for budget, names in ctx.rules.budgets:
        if names is not None and not names.matches(ctx.namespace):
            continue
        if budget.namespace_selector is not None and (
            labels is None or not budget.namespace_selector.matches(labels)
        ):
            continue
        out.append((budget, names))
    return out


def _alternatives(
    pod: PodView,
    name: str,
    per: Amount,
    total: Amount,
    usage: Usage,
    budget: QuotaBudget,
    nodes: NodeIndex,
) -> list[str]:
    """Products to pin the pod to instead: a node there fits one pod, the pod's own affinity
    does not rule them out, and this budget still has room on them."""
    spec = dict(pod.spec)
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict):  # the product in nodeSelector is what the user would change
        spec["nodeSelector"] = {k: v for k, v in selector.items() if k != GPU_PRODUCT_LABEL}
    free = Placement.of(spec)
    out = set()
    for pool in nodes.pools((GPU_PRODUCT_LABEL,)):
        product = pool.labels.get(GPU_PRODUCT_LABEL, "")
        if not product or pool.gpus.get(name, 0) < per:
            continue
        if not free.allows_product(product):
            continue
        cap = budget.products.get(product, {}).get(name)
        if cap is None or usage.by_product.get((name, product), 0) + total <= cap:
            out.add(product)
    return sorted(out)


def _kept_natively(name: str, cap: Amount, facts: Facts) -> bool:
    """Whether a ResourceQuota of the namespace caps `name` at `cap` or tighter for every
    pod: then the apiserver keeps this limit exactly, and this replica's holds need not
    count for it. A scoped quota counts some pods only, so it keeps no budget."""
    key = name if claims.class_of_key(name) else f"requests.{name}"
    return any(key in q.hard and q.hard[key] <= cap and not q.scopes for q in facts.quotas)


def _default_class(facts: Facts) -> str:
    """The global default PriorityClass (the highest-valued one, as the Priority admission
    plugin picks it): a pod that names no class gets it before quota admission."""
    best = None
    for pc in facts.priority_classes.values():
        if pc.global_default and (best is None or pc.value > best.value):
            best = pc
    return best.name if best is not None else ""


def _counting(pod: PodView, facts: Facts) -> list[Quota]:
    """The namespace's quotas that count this pod (its scopes match it, or it has none)."""
    quotas = facts.quotas
    if not any(q.scopes for q in quotas):
        return list(quotas)
    default = _default_class(facts)
    return [q for q in quotas if q.counts(pod.spec, default)]


def _for_whom(quota: Quota) -> str:
    return f" (for pods with {describe_scopes(quota.scopes)})" if quota.scopes else ""


def _caps(
    pod: PodView,
    totals: Totals | None,
    usage: Usage,
    budget: QuotaBudget,
    reach: frozenset[str],
    facts: Facts,
    spread: SetUsage | None,
) -> list[tuple[str, Amount, Amount, str]]:
    """(resource, cap, in use, product or "") of each cap of `budget` the pod is judged
    against. The budget-wide limits once per object (on a controller's lead template), with
    this replica's holds added back where no ResourceQuota keeps the limit; the product caps
    on every product the pod may reach."""
    out: list[tuple[str, Amount, Amount, str]] = []
    unheld = facts.unheld if spread is None else None  # a set's usage has every hold
    if totals is None or pod.pointer == totals.lead:
        for name, limit in budget.limits.items():
            in_use: Amount = usage.by_resource.get(name, 0)
            if unheld is not None and not _kept_natively(name, limit, facts):
                in_use += unheld.by_resource.get(name, 0)  # the quota is looser than the budget
            out.append((name, limit, in_use, ""))
    for product in sorted(reach.intersection(budget.products)):
        out += [
            (name, cap, usage.by_product.get((name, product), 0), product)
            for name, cap in budget.products[product].items()
        ]
    return out


def _over_budget(
    pod: PodView,
    ctx: Context,
    ask: dict[str, Amount],
    usage: Usage,
    budget: QuotaBudget,
    reach: frozenset[str],
    facts: Facts,
    devices: list[claims.NewDevices],
    spread: SetUsage | None = None,
) -> Iterator[Finding]:
    """Usage + ask against one budget; for a controller, all its pods at once, as advice.

    A product cap applies to every product the pod could land on (`reach`): the pod must fit
    under each, since the scheduler may put it on any of them. A suspended object (a job a
    queue holds back) takes nothing now: only what it could never get is said. A controller's
    budget-wide totals (`ctx.totals`) are judged once, on its lead template; a gang kind
    asking more than the budget allows at all could never start, and is refused. A budget over
    several namespaces (`spread`) is judged against what its whole set holds.
    """
    totals = ctx.totals
    pods = pod.replicas if ctx.kind != "Pod" else 1
    what = "this pod asks {n}" if pods == 1 else f"{pods} pods x {{per}} = {{n}}"
    if spread is not None:
        usage = spread.total
    for name, cap, used, prod in _caps(pod, totals, usage, budget, reach, facts, spread):
        whole = totals if not prod else None  # a controller's budget-wide total
        per = ask.get(name, 0) if whole is None else whole.gpus.get(name, 0)
        if per <= 0:
            continue
        total = per * pods if whole is None else per
        if whole is not None and whole.gang and total > cap:
            yield _never_fits(pod, ctx, whole, name, cap, budget)
            continue
        if ctx.suspended or used + total <= cap:
            continue  # suspended: it takes nothing until released, and is judged then
        scope = f"{name} on {prod}" if prod else name
        asked = whole.asked(name) if whole else what.format(n=show(total), per=show(per))
        where = ctx.namespace if spread is None else spread.holders(name, prod)
        others = _alternatives(pod, name, per, total, usage, budget, facts.nodes) if prod else []
        several = spread is not None
        fix = budget_fix(
            pod, ctx.namespace, budget, name, prod, used, cap, where, others, devices, several
        )
        if spread is None:
            held = f"namespace {ctx.namespace} uses {show(used)} of {show(cap)} {scope}"
        else:
            held = (
                f"budget {budget.name!r} caps {describe_set(budget)} at {show(cap)} {scope} "
                f"together and they use {show(used)} ({spread.arithmetic(name, prod)})"
            )
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: {held}; {asked}",
            fix=fix,
            field=f"{pod.field_path}.containers",
            advisory=ctx.kind != "Pod",  # controllers: their pods are judged when created
        )


def _never_fits(
    pod: PodView, ctx: Context, totals: Totals, name: str, cap: Amount, budget: QuotaBudget | str
) -> Finding:
    """A gang kind asking more than a cap allows at all: its pods wait for each other, so the
    ones the cap admits would wait forever for the ones it refuses."""
    where = f"budget {budget.name!r}" if isinstance(budget, QuotaBudget) else budget
    raise_it = (
        f"ask the platform team to raise budget {budget.name!r}"
        if isinstance(budget, QuotaBudget)
        else f"ask the platform team to raise {budget}"
    )
    return Finding(
        rule=RULE,
        summary=(
            f"{RULE}: {where} allows {show(cap)} {name} in namespace {ctx.namespace} and this "
            f"{ctx.kind} asks {totals.asked(name)} at once; its pods run together or not at "
            "all, so it could never start"
        ),
        fix=(
            f"ask for at most {show(cap)} {name} in all (fewer replicas, or fewer GPUs per "
            f"pod), or {raise_it}"
        ),
        field=f"{pod.field_path}.containers",
    )


def _native(pod: PodView, ctx: Context, ask: dict[str, Amount], facts: Facts) -> Iterator[Finding]:
    """ResourceQuota will refuse the pod later with a terse message; say it now, plainly.

    Extended resources are quota'd as `requests.<name>` (and `limits.<name>` is accepted too).
    `used` already counts admitted pods, so in-flight reservations are not added again. A
    controller is judged once for all its pods (`ctx.totals`), a gang kind that could never
    fit refused. A scoped quota judges only the pods its scopes match (for a controller,
    its lead template's).
    """
    totals = ctx.totals
    if totals is not None and pod.pointer != totals.lead:
        return
    for quota in _counting(pod, facts):
        for key, hard in quota.hard.items():
            prefix, _, name = key.partition(".")
            if prefix not in ("requests", "limits"):
                continue
            if totals is not None:
                total = totals.quota_gpus.get(name, 0)
                if total <= 0:
                    continue
                if totals.gang and total > hard and prefix == "requests":  # enforced
                    where = f"ResourceQuota {quota.name} ({key}){_for_whom(quota)}"
                    yield _never_fits(pod, ctx, totals, name, hard, where)
                    continue
            elif name in ask:
                total = ask[name]
            else:
                continue
            used = quota.used.get(key, 0)
            if ctx.suspended or used + total <= hard:
                continue
            yield Finding(
                rule=RULE,
                summary=(
                    f"{RULE}: ResourceQuota {quota.name}{_for_whom(quota)} allows {key} "
                    f"{show(hard)} and {show(used)} are used; this asks {show(total)}"
                ),
                fix=(
                    f"the API server will refuse this with 'exceeded quota: {quota.name}'. "
                    + (
                        f"Ask for at most {show(hard - used)} {name} or free GPUs in "
                        f"{ctx.namespace}"
                        if hard > used
                        else already_over(
                            f"namespace {ctx.namespace}",
                            used,
                            hard,
                            name,
                            ctx.namespace,
                            f"ResourceQuota {quota.name}",
                        )
                    )
                ),
                field=f"{pod.field_path}.containers",
                advisory=ctx.kind != "Pod",
            )


def _native_devices(
    pod: PodView, ctx: Context, devices: list[claims.NewDevices], facts: Facts
) -> Iterator[Finding]:
    """ResourceQuota charges a claim's devices per class when the claim is created: for a
    claim made from a template, just after the pod. A refused claim leaves the pod Pending
    for good, its reason only in events; say it now. `allocationMode: All` is charged as the
    most one claim can hold (32)."""
    charged = claims.device_totals(devices, claims.MAX_ALLOCATION)
    pods = pod.replicas if ctx.kind != "Pod" else 1
    for quota in facts.quotas:
        if quota.scopes:  # the apiserver matches no scope to a ResourceClaim
            continue
        for key, hard in quota.hard.items():
            per = charged.get(key)
            if per is None:
                continue
            used = quota.used.get(key, 0)
            total = per * pods
            if used + total <= hard:
                continue
            device_class = claims.class_of_key(key)
            every = (
                " (allocationMode All is charged as 32 devices)"
                if any(d.count is None for d in devices if d.device_class == device_class)
                else ""
            )
            left = hard - used if hard > used else 0
            yield Finding(
                rule=RULE,
                summary=(
                    f"{RULE}: ResourceQuota {quota.name} allows {key} {show(hard)} and "
                    f"{show(used)} are used; this asks {show(total)}{every}"
                ),
                fix=(
                    "the API server will refuse the ResourceClaim made for the pod with "
                    f"'exceeded quota: {quota.name}', and the pod will stay Pending. "
                    + devices_fix(devices, device_class, left, ctx.namespace)
                ),
                field=f"{pod.field_path}.resourceClaims",
                advisory=ctx.kind != "Pod",
            )


def _with_claims(usage: Usage, dra: DraFacts | None) -> Usage:
    """Usage with the devices the namespace's ResourceClaims take (by class key) added."""
    held = dra.claim_devices if dra is not None else None
    if not held:
        return usage
    out = Usage()
    out.by_resource.update(usage.by_resource)
    out.by_product.update(usage.by_product)
    for key, amount in held.items():
        out.by_resource[key] += amount
    return out


def _is_gpu_quota_key(key: str, ctx: Context, facts: Facts) -> bool:
    device_class = claims.class_of_key(key)
    if device_class:
        return claims.gpu_class(device_class, ctx.rules, facts.dra) is True
    return ctx.rules.is_gpu(key.partition(".")[2])


def _plus(usage: Usage, more: Usage) -> Usage:
    """`usage` with `more` added: a new value."""
    out = usage.plus(())
    for name, amount in more.by_resource.items():
        out.by_resource[name] += amount
    for pair, amount in more.by_product.items():
        out.by_product[pair] += amount
    return out


def _has_gpu_quota(
    budgets: list[tuple[QuotaBudget, NamePatterns | None]],
    facts: Facts,
    ctx: Context,
    pod: PodView,
) -> bool:
    """A budget, or a GPU ResourceQuota that counts this pod (a scoped one that does not is
    no quota for it)."""
    if budgets:
        return True
    return any(
        _is_gpu_quota_key(key, ctx, facts) for quota in _counting(pod, facts) for key in quota.hard
    )


def gpu_quota(pod: PodView, ctx: Context) -> Iterator[Finding]:
    cfg = ctx.settings.gpu_quota
    ask = pod_gpus(pod)  # what ResourceQuota counts
    devices = claims.new_devices(pod, ctx)  # DRA: GPU devices of claims made for this pod
    shares = any(c.shared_gpu for c in pod.containers)  # part of a GPU, by annotation
    if not ask and not devices and not shares:
        return
    facts, reason = trusted_facts(ctx)
    if facts is None:
        yield unknown_facts(RULE, cfg.when_unknown, reason, f"{pod.field_path}.containers")
        return
    budgets = matching_budgets(ctx, facts)
    usage = _with_claims(facts.usage, facts.dra)
    # Budgets count an `All` request as 1 device: the least it takes, so never a false denial;
    # and what the pod takes in their units (`budget_gpus`: shares, HAMi's per-GPU units).
    every = {**budget_gpus(pod, facts), **claims.device_totals(devices, 1)}
    if not every:
        return
    budgeted = {p for budget, _ in budgets for p in budget.products}
    reach = pod_products(pod, facts, budgeted) if budgeted else frozenset()
    for budget, names in budgets:
        spread = None
        if spans_several(budget):  # what the whole set holds, every hold of it counted
            own = usage if facts.unheld is None else _plus(usage, facts.unheld)
            spread = set_usage(budget, names, ctx, facts, own)
        yield from _over_budget(pod, ctx, every, usage, budget, reach, facts, devices, spread)
    if cfg.native_quota:
        yield from _native(pod, ctx, ask, facts)
        yield from _native_devices(pod, ctx, devices, facts)
    if cfg.require_quota and not _has_gpu_quota(budgets, facts, ctx, pod):
        first = next(iter(every))
        key = first if claims.class_of_key(first) else f"requests.{first}"
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: namespace {ctx.namespace} has no GPU quota; GPU pods need one",
            fix=(
                "ask the platform team for a GPU budget or a ResourceQuota with "
                f"{key} in {ctx.namespace}"
            ),
            field=f"{pod.field_path}.containers",
        )
