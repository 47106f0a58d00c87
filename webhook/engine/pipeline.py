"""The rule engine: one subject, the compiled rules and the facts in; one `Decision` out.

No I/O, no clock. The webhook, the manifest audit, the live audit and the rules tests all call
`evaluate`; only how they obtain the subject and what they do with the decision differ.
Inside, the order is fixed: scope (exemptions, overrides, which pod specs changed), then the
mutations on a working copy diffed into a patch, then the validations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from typing import Any, Final

from webhook.engine import claims, exempt
from webhook.engine.accounting import budget_gpus, hold_reach, object_totals
from webhook.engine.checks import (
    BUDGET_RULES,
    ISOLATION_RULES,
    Mutation,
    Validation,
    queue,
    spend,
)
from webhook.engine.compiled import CompiledRules, CompiledRuleSet
from webhook.engine.context import Context
from webhook.engine.decision import Decision, Mode, combine, unreadable
from webhook.engine.findings import Finding
from webhook.engine.patch import clone, diff, working_copy
from webhook.engine.podviews import PodView, UnreadableObject, pod_views
from webhook.engine.queueing import queue_metadata
from webhook.engine.sharedmaps import RULE, judge_config_map
from webhook.engine.sharing import mark_shared
from webhook.engine.subject import Subject
from webhook.engine.totals import Totals
from webhook.engine.turns import give_way
from webhook.engine.workloads import Workload
from webhook.facts.dra import DraFacts
from webhook.facts.model import Facts, PodGpus

__all__ = ["Stage", "evaluate"]


class Stage(Enum):
    """How much of admission to run: what `/mutate`, `/validate` and an audit each need."""

    MUTATE = "mutate"  # the patch only
    VALIDATE = "validate"  # the verdict on the object as given, and the hold
    ADMIT = "admit"  # both, as the apiserver chains them: the verdict on the patched object


def evaluate(
    subject: Subject,
    rules: CompiledRuleSet,
    facts: Facts | None = None,
    *,
    stage: Stage = Stage.ADMIT,
    dra: DraFacts | None = None,
) -> Decision:
    """The decision about `subject`; an object with impossible field types is refused.

    `dra`: the DRA objects claims are resolved against when they are not the facts' own (an
    audit without cluster facts uses those found in its files); by default the facts'."""
    labels = subject.namespace_labels
    if labels is None and facts is not None:
        labels = facts.namespace_labels
    try:
        if dra is None and facts is not None:
            dra = facts.dra
        return _evaluate(subject, rules, facts, stage, labels, dra)
    except UnreadableObject as exc:
        return unreadable(subject.kind, exc.path, exc.problem)


def _evaluate(
    subject: Subject,
    rules: CompiledRuleSet,
    facts: Facts | None,
    stage: Stage,
    labels: Mapping[str, str] | None,
    dra: DraFacts | None,
) -> Decision:
    if subject.kind == "ConfigMap" and subject.group == "":
        return _config_map(subject, rules, labels)
    compiled, views, released = _scope(subject, rules, labels)
    views = claims.resolve(views, compiled, dra)  # DRA claims that reach GPU classes
    workload = rules.workloads.get(subject.group, subject.kind)
    runtime = workload is not None and workload.runtime
    meta = None
    if compiled.queue_active:  # where its queue name is: only gpu-queue reads it
        meta = queue_metadata(subject.group, subject.kind, subject.obj, runtime)
    ctx = Context(
        compiled,
        subject.namespace,
        subject.kind,
        subject.operation,
        facts,
        dra,
        exempt.workload_of(subject),  # what a node agent's denial advises exempting
        workload is not None and workload.suspended(subject.obj),
        meta,
    )
    patch: list[dict[str, Any]] = []
    mutated_by: list[str] = []
    if stage is not Stage.VALIDATE:
        changed = [v for v in views if v.pointer not in released]
        _mutate(changed, ctx, compiled.mutations, patch, mutated_by)
        gpu_ask = any(v.asks_gpu and not v.isolation_only for v in views)
        # gpu-queue labels the object itself (no pod spec's edit), when it asks for GPUs.
        if compiled.queue_mutation and gpu_ask:
            labelled = queue.queue_label_patch(ctx.queue_meta, ctx, facts)
            if labelled:
                patch.extend(labelled)
                mutated_by.append(queue.RULE)
        if (
            compiled.spend_patch
            and workload is not None
            and subject.operation == "CREATE"
            and gpu_ask
        ):
            ops = spend.object_patch(subject.obj, workload, compiled.settings.gpu_spend)
            if ops:
                patch.extend(ops)
                mutated_by.append("gpu-spend")
        if stage is Stage.MUTATE:
            return combine((), patch=patch, mutated_by=mutated_by)
    obj = subject.obj
    if patch:
        import jsonpatch  # only audits get here; the webhook never applies its own patches

        # A JSON-only clone is several times cheaper than the deepcopy apply_patch would make.
        obj = jsonpatch.JsonPatch(patch).apply(clone(obj), in_place=True)
        subject = dataclasses.replace(subject, obj=obj)
        if compiled.queue_active:
            meta = queue_metadata(subject.group, subject.kind, obj, runtime)
        _, views, released = _scope(subject, rules, labels)  # the same namespace: same rules
        views = claims.resolve(views, compiled, dra)
    totals, specs = _whole(subject, views, ctx, workload)
    ctx = ctx.judging(meta, totals, specs, spend.deadline_of(obj, workload))
    active = compiled.validations if facts is not None else compiled.offline_validations
    findings = _validate([v for v in views if v.pointer not in released], ctx, active)
    if released:  # templates unchanged by the release: judged against the budgets alone
        budget = tuple((v, m) for v, m in active if v.rule in BUDGET_RULES)
        findings += _validate([v for v in views if v.pointer in released], ctx, budget)
    return combine(
        findings,
        patch=patch,
        mutated_by=mutated_by,
        hold=_hold(subject, views, ctx),
        mutated=obj if stage is Stage.ADMIT else None,
    )


def _whole(
    subject: Subject, views: list[PodView], ctx: Context, workload: Workload | None
) -> tuple[Totals | None, tuple[Mapping[str, Any], ...]]:
    """What gpu-quota, gpu-queue and gpu-spend read of a controller as a whole: its GPU asks,
    all its pods at once, and the pod specs of its templates that ask for GPUs (a pod: none)."""
    if subject.kind == "Pod" or not views:
        return None, ()
    totals = object_totals(views, ctx, workload is not None and workload.gang)
    return totals, tuple(v.spec for v in views if v.asks_gpu)


def _config_map(
    subject: Subject, rules: CompiledRuleSet, labels: Mapping[str, str] | None
) -> Decision:
    """A write to what may be a GPU-sharing scheduler's ConfigMap (`engine.sharedmaps`),
    judged under visible-devices' mode in its namespace."""
    if rules.exempt_namespace(subject.namespace, labels):
        return Decision()
    compiled = rules.for_namespace(subject.namespace, labels)
    mode = next((m for v, m in compiled.validations if v.rule == RULE), Mode.OFF)
    return judge_config_map(subject, rules.sharing.writers, mode)


def _new_ephemeral(subject: Subject, views: list[PodView]) -> list[PodView]:
    """pods/ephemeralcontainers: judge only the containers this update adds, for GPU access."""
    old = subject.old_obj if isinstance(subject.old_obj, dict) else {}
    old_spec = old.get("spec") if isinstance(old.get("spec"), dict) else {}
    before = old_spec.get("ephemeralContainers") if isinstance(old_spec, dict) else None
    names = (
        {c.get("name") for c in before if isinstance(c, dict)}
        if isinstance(before, list)
        else set()
    )
    out = []
    for view in views:
        focus = frozenset(c.slot for c in view.containers if c.ephemeral and c.name not in names)
        if focus:
            out.append(dataclasses.replace(view, isolation_only=True, focus=focus))
    return out


def _scope(
    subject: Subject, rules: CompiledRuleSet, labels: Mapping[str, str] | None
) -> tuple[CompiledRules, list[PodView], frozenset[str]]:
    """The rules in force for the subject's namespace (whose labels are `labels`), the pod
    specs they apply to, and the pointers of those judged only because the update releases
    a suspended object (`_released`).

    Pods: CREATE only (a pod's spec is immutable, and a patch on UPDATE would break an innocent
    label change). Controllers: CREATE, and UPDATE only for templates that changed, so an old
    non-compliant Deployment can still be scaled or relabelled; but an update that releases
    a suspended object brings every template before the budgets, changed or not.
    """
    none: frozenset[str] = frozenset()
    if rules.exempt_namespace(subject.namespace, labels):
        return rules.base, [], none
    compiled = rules.for_namespace(subject.namespace, labels)
    if subject.operation not in ("CREATE", "UPDATE"):
        return compiled, [], none
    ephemeral = subject.subresource == "ephemeralcontainers"
    if subject.operation == "UPDATE" and subject.kind == "Pod" and not ephemeral:
        return compiled, [], none
    if subject.subresource and not ephemeral:
        return compiled, [], none
    table = rules.workloads
    views = pod_views(
        subject.obj, group=subject.group, kind=subject.kind, is_gpu=compiled.is_gpu, table=table
    )
    views = mark_shared(views, rules.sharing)
    released = none
    if ephemeral:
        views = _new_ephemeral(subject, views)
    elif subject.operation == "UPDATE" and views and subject.old_obj is not None:
        old_specs = {v.pointer: v.spec for v in _old_views(subject, compiled, rules)}
        if _released(subject, rules):
            released = frozenset(v.pointer for v in views if old_specs.get(v.pointer) == v.spec)
        else:
            views = [v for v in views if old_specs.get(v.pointer) != v.spec]
    kept = (exempt.scoped(v, subject, rules) for v in views)
    return compiled, [v for v in kept if v is not None], released


def _released(subject: Subject, rules: CompiledRuleSet) -> bool:
    """An update that sets a suspended object's suspend field false (Kueue admitting a job):
    its pods are about to be created, so now it is judged against the budgets."""
    workload = rules.workloads.get(subject.group, subject.kind)
    return (
        workload is not None
        and workload.suspended(subject.old_obj)
        and not workload.suspended(subject.obj)
    )


def _old_views(subject: Subject, compiled: CompiledRules, rules: CompiledRuleSet) -> list[PodView]:
    try:
        return pod_views(
            subject.old_obj,
            group=subject.group,
            kind=subject.kind,
            is_gpu=compiled.is_gpu,
            table=rules.workloads,
        )
    except UnreadableObject:
        return []  # an unreadable old object: treat every template as changed


# More containers than this, and a pod spec's every rule lets other threads in first
# (`turns.give_way`): a review of a large object is decided beside the event loop.
_FEW: Final = 16


def _mutate(
    views: list[PodView],
    ctx: Context,
    mutations: tuple[Mutation, ...],
    patch: list[dict[str, Any]],
    mutated_by: list[str],
) -> None:
    """Each GPU pod spec: copy, let every enabled mutation edit the copy, diff it into `patch`."""
    if not mutations:
        return
    for view in views:
        if len(views) > 1:
            give_way()  # pod spec after pod spec (a RayCluster's groups): the loop in between
        if not view.mutable:
            continue  # judged only: its pods are mutated when they are created
        # GPU pods get every mutation; other pods (and pods judged for GPU access only) get
        # those that decide for themselves, like hiding the GPUs from a pod that can reach them.
        full = view.asks_gpu and not view.isolation_only
        relaxed = view.relaxed
        todo = [m for m in mutations if (full or m.any_pod) and m.rule not in relaxed]
        if not todo:
            continue
        work = working_copy(view.spec, (c.slot for c in view.containers))
        big = len(view.containers) > _FEW
        for mutation in todo:
            if big:
                give_way()  # each mutation walks every container: let the loop in between
            if mutation.apply(work, view, ctx) and mutation.rule not in mutated_by:
                mutated_by.append(mutation.rule)
        patch.extend(diff(view.spec, work, view.pointer))


def _validate(
    views: list[PodView], ctx: Context, active: tuple[tuple[Validation, Mode], ...]
) -> list[tuple[Finding, Mode]]:
    """Every finding of every active validation, with its rule's mode.

    Without facts the cluster-aware rules are not active at all (an audit lists them as not
    checked); with stale facts each rule's whenUnknown decides.
    """
    out: list[tuple[Finding, Mode]] = []
    for view in views:
        if len(views) > 1:
            give_way()  # pod spec after pod spec (a RayCluster's groups): the loop in between
        gpu = view.asks_gpu
        big = len(view.containers) > _FEW
        for validation, mode in active:
            if big:
                give_way()  # each validation walks every container: let the loop in between
            if validation.gpu_only and not gpu:
                continue
            if view.isolation_only and validation.rule not in ISOLATION_RULES:
                continue
            if validation.rule in view.relaxed:
                continue
            for finding in validation.check(view, ctx):
                give_way()  # a finding's text is the costliest work per container
                out.append((finding, mode))
    return out


def _hold(subject: Subject, views: list[PodView], ctx: Context) -> PodGpus | None:
    """What an admitted pod holds until the watch sees it: pod CREATEs with GPUs (or a share
    of one, `budget_gpus`) only.

        Controllers are judged again when their pods are created, so they hold nothing. The hold
        is charged to every budgeted product the pod could land on (`hold_reach`). GPU devices of
        claims made from templates are held too (by `<class>.deviceclass.resource.k8s.io/devices`,
        an `All` request as 1), until the watch shows a claim made for the pod.
    """
    if subject.kind != "Pod" or subject.group != "" or subject.operation != "CREATE" or not views:
        return None
    if views[0].isolation_only:
        return None
    gpus = {
        **budget_gpus(views[0], ctx.facts),
        **claims.device_totals(claims.new_devices(views[0], ctx), 1),
    }
    if not gpus:
        return None
    reach = hold_reach(views[0], ctx)
    return PodGpus(subject.namespace, subject.name, "Pending", gpus, reach=reach)
