"""Namespace GPU budgets and native ResourceQuota: say early and plainly what will be refused."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

from webhook.engine.accounting import pod_gpus, pod_product
from webhook.engine.checks.trust import trusted_facts, unknown_facts
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import PodView
from webhook.facts.model import Facts, Usage
from webhook.quantity import show
from webhook.ruleset.models import QuotaBudget

__all__ = ["gpu_quota", "matching_budgets"]

RULE = "gpu-quota"


def matching_budgets(ctx: Context, facts: Facts) -> list[QuotaBudget]:
    labels = facts.namespace_labels
    out = []
    for budget, names in ctx.rules.budgets:
        if names is not None and not names.matches(ctx.namespace):
            continue
        if budget.namespace_selector is not None and (
            labels is None or not budget.namespace_selector.matches(labels)
        ):
            continue
        out.append(budget)
    return out


def _over_budget(
    pod: PodView, ctx: Context, ask: dict[str, Fraction], usage: Usage, budget: QuotaBudget
) -> Iterator[Finding]:
    """Usage + ask against one budget; for a controller, replicas x ask, as advice only."""
    pods = pod.replicas if ctx.kind != "Pod" else 1
    what = "this pod asks {n}" if pods == 1 else f"{pods} pods x {{per}} = {{n}}"
    product = pod_product(pod)
    limits = [
        (name, Fraction(cap), usage.by_resource.get(name, Fraction(0)), "")
        for name, cap in budget.limits.items()
    ]
    if product in budget.products:
        limits += [
            (name, Fraction(cap), usage.by_product.get((name, product), Fraction(0)), product)
            for name, cap in budget.products[product].items()
        ]
    for name, cap, used, prod in limits:
        per = ask.get(name, Fraction(0))
        if per <= 0:
            continue
        total = per * pods
        if used + total <= cap:
            continue
        scope = f"{name} on {prod}" if prod else name
        asked = what.format(n=show(total), per=show(per))
        yield Finding(
            rule=RULE,
            summary=(
                f"{RULE}: namespace {ctx.namespace} uses {show(used)} of {show(cap)} {scope}; "
                f"{asked}"
            ),
            fix=(
                f"ask for at most {show(max(cap - used, Fraction(0)))} {scope}, wait for running "
                f"GPU pods in {ctx.namespace} to finish, or ask the platform team to raise "
                f"budget {budget.name!r}"
            ),
            field=f"{pod.field_path}.containers",
            advisory=ctx.kind != "Pod",  # controllers: their pods are judged when created
        )


def _native(
    pod: PodView, ctx: Context, ask: dict[str, Fraction], facts: Facts
) -> Iterator[Finding]:
    """ResourceQuota will refuse the pod later with a terse message; say it now, plainly.

    Extended resources are quota'd as `requests.<name>` (and `limits.<name>` is accepted too).
    `used` already counts admitted pods, so in-flight reservations are not added again.
    """
    for quota in facts.quotas:
        for key, hard in quota.hard.items():
            prefix, _, name = key.partition(".")
            if prefix not in ("requests", "limits") or name not in ask:
                continue
            used = quota.used.get(key, Fraction(0))
            total = ask[name] * (pod.replicas if ctx.kind != "Pod" else 1)
            if used + total <= hard:
                continue
            yield Finding(
                rule=RULE,
                summary=(
                    f"{RULE}: ResourceQuota {quota.name} allows {key} {show(hard)} and "
                    f"{show(used)} are used; this asks {show(total)}"
                ),
                fix=(
                    f"the API server will refuse this with 'exceeded quota: {quota.name}'. Ask "
                    f"for at most {show(max(hard - used, Fraction(0)))} {name} or free GPUs in "
                    f"{ctx.namespace}"
                ),
                field=f"{pod.field_path}.containers",
                advisory=ctx.kind != "Pod",
            )


def _has_gpu_quota(budgets: list[QuotaBudget], facts: Facts, ctx: Context) -> bool:
    if budgets:
        return True
    return any(
        ctx.rules.is_gpu(key.partition(".")[2]) for quota in facts.quotas for key in quota.hard
    )


def gpu_quota(pod: PodView, ctx: Context) -> Iterator[Finding]:
    cfg = ctx.settings.gpu_quota
    ask = pod_gpus(pod)
    if not ask:
        return
    facts, reason = trusted_facts(ctx)
    if facts is None:
        yield unknown_facts(RULE, cfg.when_unknown, reason, f"{pod.field_path}.containers")
        return
    budgets = matching_budgets(ctx, facts)
    usage = facts.usage
    for budget in budgets:
        yield from _over_budget(pod, ctx, ask, usage, budget)
    if cfg.native_quota:
        yield from _native(pod, ctx, ask, facts)
    if cfg.require_quota and not _has_gpu_quota(budgets, facts, ctx):
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: namespace {ctx.namespace} has no GPU quota; GPU pods need one",
            fix=(
                "ask the platform team for a GPU budget or a ResourceQuota with "
                f"requests.{next(iter(ask))} in {ctx.namespace}"
            ),
            field=f"{pod.field_path}.containers",
        )
