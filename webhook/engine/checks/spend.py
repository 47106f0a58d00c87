"""gpu-spend: how much of a team's GPUs one pod or one workload may take, and for how long.

A budget caps a namespace; it does not stop one job from taking all of it. The ceilings here
(`maxPerPod`, `maxPerWorkload`) sit below the budget: a workload is judged by what all its
templates and replicas ask at once (`ctx.totals`), as gpu-quota judges it. A GPU job that
never ends, or whose finished object is never deleted, keeps holding what its pods reserved
(and a Kueue or KAI queue's quota): jobs of the kinds that have the fields
(`WorkloadKind.ttl`, `.deadline`) get `ttlSecondsAfterFinished` and `activeDeadlineSeconds`
when they set none, and a deadline above `maxActiveDeadlineSeconds` is refused.

The object-level fields are not in a pod spec, so their patch is made here
(`object_patch`), called by the pipeline once per object, not by the per-pod-spec mutations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from webhook.engine.accounting import budget_gpus
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import PodView
from webhook.engine.totals import template_name
from webhook.engine.workloads import Workload, read
from webhook.quantity import Amount, show
from webhook.ruleset.models import SpendRule

__all__ = ["deadline_of", "gpu_spend", "object_patch"]

RULE = "gpu-spend"


def _where(path: tuple[str, ...]) -> str:
    return ".".join(path)


def deadline_of(obj: object, workload: Workload | None) -> tuple[str, object] | None:
    """(dotted path, value) of the object's activeDeadlineSeconds; None for a kind without
    one. The value is None when it is unset."""
    if workload is None or workload.deadline is None:
        return None
    return _where(workload.deadline), read(obj, workload.deadline)


def object_patch(obj: object, workload: Workload, cfg: SpendRule) -> list[dict[str, Any]]:
    """JSON-patch operations setting the configured ttlSecondsAfterFinished and
    activeDeadlineSeconds where the object has the field and sets none. A missing parent
    (a PyTorchJob without `runPolicy`) is added whole; a parent of another type is left to
    the apiserver's schema, and nothing is set under it."""
    wanted = [
        (workload.ttl, cfg.ttl_seconds_after_finished),
        (workload.deadline, cfg.active_deadline_seconds),
    ]
    ops: list[dict[str, Any]] = []
    added: dict[tuple[str, ...], dict[str, Any]] = {}  # parents this patch adds, by path
    for path, value in wanted:
        if path is None or value is None or read(obj, path) is not None:
            continue
        parent, key = path[:-1], path[-1]
        there = read(obj, parent) if parent else obj
        if isinstance(there, dict):
            ops.append({"op": "add", "path": _pointer(path), "value": value})
        elif there is None and parent in added:
            added[parent][key] = value
        elif there is None and parent and isinstance(read(obj, parent[:-1]), dict):
            fresh = {key: value}
            added[parent] = fresh
            ops.append({"op": "add", "path": _pointer(parent), "value": fresh})
    return ops


def _pointer(path: tuple[str, ...]) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in path)


def gpu_spend(pod: PodView, ctx: Context) -> Iterator[Finding]:
    cfg = ctx.settings.gpu_spend
    if cfg.max_per_pod:
        yield from _per_pod(pod, ctx, cfg)
    totals = ctx.totals
    lead = totals is None or pod.pointer == totals.lead  # object-wide findings said once
    if cfg.max_per_workload and lead:
        yield from _per_workload(pod, ctx, cfg)
    if cfg.max_active_deadline_seconds is not None and lead and ctx.deadline is not None:
        yield from _deadline(ctx, cfg.max_active_deadline_seconds)


def _per_pod(pod: PodView, ctx: Context, cfg: SpendRule) -> Iterator[Finding]:
    asks = budget_gpus(pod, ctx.facts)
    for name, cap in sorted(cfg.max_per_pod.items()):
        per = asks.get(name, 0)
        if per <= cap:
            continue
        pods = (
            "this pod asks"
            if ctx.kind == "Pod"
            else f"each pod of {template_name(pod.field_path)} asks"
        )
        yield Finding(
            rule=RULE,
            summary=(
                f"{RULE}: {pods} {show(per)} {name}; one pod may ask at most {show(cap)} in "
                f"namespace {ctx.namespace}"
            ),
            fix=(
                f"ask for at most {show(cap)} {name} per pod (split the work over more pods), "
                f"or ask the platform team to raise gpu-spend maxPerPod for {ctx.namespace}"
            ),
            field=f"{pod.field_path}.containers",
        )


def _per_workload(pod: PodView, ctx: Context, cfg: SpendRule) -> Iterator[Finding]:
    totals = ctx.totals
    asks: dict[str, Amount] = budget_gpus(pod, ctx.facts) if totals is None else totals.gpus
    for name, cap in sorted(cfg.max_per_workload.items()):
        total = asks.get(name, 0)
        if total <= cap:
            continue
        asked = totals.asked(name) if totals is not None else f"this pod asks {show(total)}"
        yield Finding(
            rule=RULE,
            summary=(
                f"{RULE}: one {ctx.kind} may ask at most {show(cap)} {name} at once in "
                f"namespace {ctx.namespace}, and this one asks {asked}"
            ),
            fix=(
                f"ask for at most {show(cap)} {name} in all (fewer replicas, or fewer GPUs "
                f"per pod), or ask the platform team to raise gpu-spend maxPerWorkload for "
                f"{ctx.namespace}"
            ),
            field=f"{pod.field_path}.containers",
        )


def _deadline(ctx: Context, most: int) -> Iterator[Finding]:
    where, value = ctx.deadline or ("", None)
    fix = f"set {where} to at most {most} seconds"
    if value is None:
        yield Finding(
            rule=RULE,
            summary=(
                f"{RULE}: this {ctx.kind} sets no {where}; GPU jobs in namespace "
                f"{ctx.namespace} may run at most {most} seconds"
            ),
            fix=fix,
            field=where,
        )
    elif isinstance(value, bool) or not isinstance(value, int):
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: {where} is {value!r}, not a number of seconds",
            fix=fix,
            field=where,
        )
    elif value > most:
        days = f" ({value / 86400:.1f} days)" if value >= 86400 else ""
        yield Finding(
            rule=RULE,
            summary=(
                f"{RULE}: {where} is {value}{days}; GPU jobs in namespace {ctx.namespace} "
                f"may run at most {most} seconds"
            ),
            fix=f"{fix}, or ask the platform team to raise gpu-spend "
            f"maxActiveDeadlineSeconds for {ctx.namespace}",
            field=where,
        )
