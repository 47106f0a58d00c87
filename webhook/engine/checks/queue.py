"""gpu-queue: GPU workloads go through a batch queue that exists and could ever admit them.

Kueue and KAI Scheduler say nothing at apply time: a job naming a LocalQueue that does not
exist, or asking more than its ClusterQueue can ever give, is stored, created suspended, and
waits forever with the reason in a Workload status. This rule says it at `kubectl apply`.

The object itself is judged (a Job, a PyTorchJob, a pod of its own), once, on its lead
template, with the GPUs of all its templates and replicas (`ctx.totals`); a pod or Job that a
controller made is judged at that controller. The queue is named by a label on the object:
Kueue's `kueue.x-k8s.io/queue-name` (a LocalQueue of the namespace), or KAI's
`kai.scheduler/queue` / Run:ai's `runai/queue` (a cluster-scoped Queue).

What a ClusterQueue can ever give one workload of a resource is, over the flavors some GPU
template's node selection allows (a ResourceFlavor's `nodeLabels` against the pod's), each
flavor's `nominalQuota` plus its `borrowingLimit` (nothing borrowed outside a cohort; in a
cohort with no borrowing limit, no bound we can know). A KAI queue gives at most its GPU
`limit` and each ancestor's (a limit of -1, 0 or none is read as no bound).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

from webhook.engine.accounting import pod_gpus
from webhook.engine.checks.trust import trusted_facts, unknown_facts
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import PodView
from webhook.engine.queueing import QueueMeta
from webhook.facts.model import Facts
from webhook.facts.nodematch import Placement, expr_matches
from webhook.facts.queues import ClusterQueue, QueueFacts
from webhook.quantity import Amount, show
from webhook.ruleset.rulemodels import QueueRule

__all__ = [
    "RULE",
    "default_local_queue",
    "gpu_queue",
    "named_queue",
    "queue_label_patch",
]

RULE = "gpu-queue"
KAI_GPU = "nvidia.com/gpu"  # what a KAI queue's `gpu` quota and limit count


def _labels(meta: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    value = (meta or {}).get(key)
    return value if isinstance(value, dict) else {}


def named_queue(meta: Mapping[str, Any] | None, cfg: QueueRule) -> tuple[str, str, str] | None:
    """(system "kueue" or "kai", the label or annotation, the queue) the object names."""
    labels, annotations = _labels(meta, "labels"), _labels(meta, "annotations")
    for key in cfg.kueue_labels:
        if isinstance(labels.get(key), str) and labels[key]:
            return "kueue", f"label {key}", labels[key]
    for key in cfg.kai_labels:
        if isinstance(labels.get(key), str) and labels[key]:
            return "kai", f"label {key}", labels[key]
    for key in cfg.kueue_annotations:
        if isinstance(annotations.get(key), str) and annotations[key]:
            return "kueue", f"annotation {key}", annotations[key]
    return None


def default_local_queue(cfg: QueueRule, queues: QueueFacts | None) -> str:
    """The LocalQueue an unlabelled workload gets: the rule's, else one named `default`
    (Kueue's convention), else the namespace's only one; "" when none can be told."""
    if cfg.default_queue:
        return cfg.default_queue
    local = queues.local_queues if queues is not None else None
    if not local:
        return ""
    if "default" in local:
        return "default"
    return next(iter(local)) if len(local) == 1 else ""


def queue_label_patch(
    where: QueueMeta | None, ctx: Context, facts: Facts | None
) -> list[dict[str, Any]]:
    """The JSON patch that labels an unlabelled GPU workload with its namespace's default
    LocalQueue, at `where` (`queue_metadata`); never over a queue the author named."""
    cfg = ctx.settings.gpu_queue
    if where is None or not cfg.kueue_labels or named_queue(where.value, cfg) is not None:
        return []
    queue = default_local_queue(cfg, facts.queues if facts is not None else None)
    if not queue:
        return []
    key = cfg.kueue_labels[0]
    if where.value is None:
        return [{"op": "add", "path": where.pointer, "value": {"labels": {key: queue}}}]
    if not isinstance(where.value.get("labels"), dict):
        return [{"op": "add", "path": f"{where.pointer}/labels", "value": {key: queue}}]
    escaped = key.replace("~", "~0").replace("/", "~1")
    return [{"op": "add", "path": f"{where.pointer}/labels/{escaped}", "value": queue}]


def _field(where: QueueMeta, how: str) -> str:
    kind, _, key = how.partition(" ")
    return f"{where.field}.{'labels' if kind == 'label' else 'annotations'}[{key}]"


def _takes(queues: QueueFacts, local: str, facts: Facts, ask: Mapping[str, Amount]) -> bool:
    """Whether a LocalQueue's ClusterQueue exists, selects the namespace and covers the ask."""
    cq = (queues.cluster_queues or {}).get((queues.local_queues or {}).get(local, ""))
    if cq is None:
        return False
    labels = facts.namespace_labels
    if labels is not None and not cq.admits_namespace(labels):
        return False
    return all(cq.covers(name) for name, amount in ask.items() if amount > 0)


def _usable(queues: QueueFacts, facts: Facts, ask: Mapping[str, Amount]) -> str:
    """The queues a GPU workload of this namespace may name, as a sentence part: LocalQueues
    whose ClusterQueue takes it (others are named apart), and the KAI leaf queues."""
    local = sorted(queues.local_queues or {})
    usable = [q for q in local if _takes(queues, q, facts, ask)]
    others = [q for q in local if q not in usable]
    leaves = queues.kai_leaves()
    parts = []
    if usable:
        parts.append(f"LocalQueues in {facts.namespace}: {', '.join(usable)}")
    elif others:
        parts.append(
            f"no LocalQueue in {facts.namespace} takes GPU workloads from it ({', '.join(others)} "
            "do not: their ClusterQueues do not select the namespace or cover the GPUs)"
        )
    if leaves:
        more = f" and {len(leaves) - 10} more" if len(leaves) > 10 else ""
        parts.append(f"KAI queues: {', '.join(leaves[:10])}{more}")
    if not parts:
        return f"namespace {facts.namespace} has no LocalQueue, and the cluster no KAI queue"
    return "; ".join(parts)


def _flavor_labels_allow(labels: Mapping[str, str], placement: Placement) -> bool:
    """Whether the pod's node selection allows nodes with a flavor's labels: Kueue reads the
    pod's nodeSelector and required node affinity on the keys the flavor sets, only those."""
    if any(k in labels and labels[k] != v for k, v in placement.selector):
        return False
    if not placement.terms:
        return True
    return any(
        all(expr_matches(e, labels) for e in t.exprs if e.get("key") in labels)
        for t in placement.terms
    )


def _cap(
    cq: ClusterQueue,
    resource: str,
    placements: list[Placement],
    flavors: Mapping[str, Mapping[str, str]],
) -> tuple[Amount, str] | None:
    """(the most `cq` can ever give of `resource`, how); None: no bound we can know. A flavor
    counts when some GPU template's node selection allows it."""
    total: Amount = 0
    terms = []
    for group in cq.groups:
        if resource not in group.covered:
            continue
        for flavor in group.flavors:
            labels = flavors.get(flavor.name, {})
            if not any(_flavor_labels_allow(labels, p) for p in placements):
                continue
            nominal = flavor.nominal.get(resource, 0)
            borrowing = flavor.borrowing.get(resource) if cq.cohort else 0
            if borrowing is None:
                return None  # borrows whatever its cohort lends
            total += nominal + borrowing
            borrowed = f" + borrowingLimit {show(borrowing)}" if cq.cohort else ""
            terms.append(f"flavor {flavor.name}: nominalQuota {show(nominal)}{borrowed}")
    how = " + ".join(terms) if terms else "no flavor of it matches the pod's node selection"
    return total, how


def _asked(ctx: Context, pod: PodView, name: str, ask: Mapping[str, Amount]) -> str:
    if ctx.totals is not None:
        return ctx.totals.asked(name)
    return f"this pod asks {show(ask.get(name, 0))}"


def _never(
    ctx: Context,
    pod: PodView,
    what: tuple[str, str],
    cap: Amount,
    how: str,
    name: str,
    ask: Mapping[str, Amount],
) -> Finding:
    """A workload its queue can never admit: refused for a gang kind, said for the others.
    `what`: (the queue as the summary names it, the setting a platform team would raise)."""
    queue, setting = what
    gang = ctx.totals is not None and ctx.totals.gang
    tail = (
        "; its pods run together or not at all, so it would wait forever"
        if gang
        else "; it would wait suspended for GPUs its queue never has"
    )
    return Finding(
        rule=RULE,
        summary=(
            f"{RULE}: {queue} gives at most {show(cap)} {name} ({how}) and this {ctx.kind} asks "
            f"{_asked(ctx, pod, name, ask)}{tail}"
        ),
        fix=(
            f"ask for at most {show(cap)} {name} in all (fewer replicas, or fewer GPUs per pod), "
            f"name a queue with more quota, or ask the platform team to raise {setting}"
        ),
        field=f"{pod.field_path}.containers",
        advisory=not gang,
    )


def _kueue(
    pod: PodView,
    ctx: Context,
    facts: Facts,
    queues: QueueFacts,
    queue: str,
    how: str,
    ask: Mapping[str, Amount],
) -> Iterator[Finding]:
    cfg = ctx.settings.gpu_queue
    where = ctx.queue_meta
    assert where is not None  # gpu_queue judges only what a queue takes
    field = _field(where, how)
    local, clusters = queues.local_queues, queues.cluster_queues
    if local is None or clusters is None:
        yield unknown_facts(RULE, cfg.when_unknown, "Kueue's queues cannot be read", field)
        return
    if queue not in local:
        yield Finding(
            rule=RULE,
            summary=(
                f"{RULE}: {how} names LocalQueue {queue}, which does not exist in namespace "
                f"{facts.namespace}; Kueue would keep this {ctx.kind} suspended for good"
            ),
            fix=f"name one of the queues it may use ({_usable(queues, facts, ask)})",
            field=field,
        )
        return
    cq_name = local[queue]
    cq = clusters.get(cq_name)
    if cq is None:
        yield Finding(
            rule=RULE,
            summary=(
                f"{RULE}: LocalQueue {queue} points to ClusterQueue {cq_name or '(none)'}, which "
                "does not exist; nothing it holds is ever admitted"
            ),
            fix=f"ask the platform team to create ClusterQueue {cq_name}, or name another queue",
            field=field,
        )
        return
    labels = facts.namespace_labels
    if labels is not None and not cq.admits_namespace(labels):
        yield Finding(
            rule=RULE,
            summary=(
                f"{RULE}: ClusterQueue {cq.name} (of LocalQueue {queue}) admits no workload of "
                f"namespace {facts.namespace}: its namespaceSelector does not select it"
            ),
            fix="ask the platform team to widen its namespaceSelector, or name another queue",
            field=field,
        )
        return
    placements = [Placement.of(spec) for spec in ctx.gpu_specs or (pod.spec,)]
    for name in sorted(ask):
        if ask[name] <= 0:
            continue
        if not cq.covers(name):
            yield Finding(
                rule=RULE,
                summary=(
                    f"{RULE}: ClusterQueue {cq.name} (of LocalQueue {queue}) covers no {name}; "
                    f"Kueue can never admit a workload asking for it"
                ),
                fix=f"name a queue whose ClusterQueue covers {name}, or ask the platform team "
                f"to add {name} to ClusterQueue {cq.name}'s coveredResources",
                field=field,
            )
            continue
        bound = _cap(cq, name, placements, queues.flavors or {})
        if bound is None:
            continue
        cap, arithmetic = bound
        if ask[name] > cap:
            what = (
                f"ClusterQueue {cq.name} (of LocalQueue {queue})",
                f"ClusterQueue {cq.name}'s nominalQuota or borrowingLimit",
            )
            yield _never(ctx, pod, what, cap, arithmetic, name, ask)


def _kai(
    pod: PodView,
    ctx: Context,
    facts: Facts,
    queues: QueueFacts,
    queue: str,
    how: str,
    ask: Mapping[str, Amount],
) -> Iterator[Finding]:
    cfg = ctx.settings.gpu_queue
    where = ctx.queue_meta
    assert where is not None
    field = _field(where, how)
    if queues.kai_queues is None:
        yield unknown_facts(RULE, cfg.when_unknown, "KAI's queues cannot be read", field)
        return
    if queue not in queues.kai_queues:
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: {how} names KAI queue {queue}, which does not exist",
            fix=f"name one of the queues it may use ({_usable(queues, facts, ask)})",
            field=field,
        )
        return
    if queue not in queues.kai_leaves():
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: {how} names KAI queue {queue}, a parent queue; only leaf queues "
            "take jobs",
            fix=f"name one of its child queues ({', '.join(queues.kai_leaves()[:10])})",
            field=field,
        )
        return
    name = KAI_GPU
    asked = ask.get(name, 0)
    limits = queues.kai_limits(queue)
    if asked <= 0 or not limits:
        return
    tightest, cap = min(limits, key=lambda item: item[1])
    cap_amount: Amount = Fraction(cap).limit_denominator(1000)
    if asked > cap_amount:
        how_limit = f"spec.resources.gpu.limit {show(cap_amount)}"
        if tightest != queue:
            how_limit += f" of its ancestor {tightest}"
        what = (f"KAI queue {queue}", f"the GPU limit of KAI queue {tightest}")
        yield _never(ctx, pod, what, cap_amount, how_limit, name, ask)


def gpu_queue(pod: PodView, ctx: Context) -> Iterator[Finding]:
    totals = ctx.totals
    if totals is not None and pod.pointer != totals.lead:
        return  # the object is judged once, on its lead template
    where = ctx.queue_meta
    if where is None:
        return  # no queue takes it as such (see `queue_metadata`)
    ask = dict(totals.gpus) if totals is not None else pod_gpus(pod)
    if not any(v > 0 for v in ask.values()):
        return
    cfg = ctx.settings.gpu_queue
    named = named_queue(where.value, cfg)
    facts, reason = trusted_facts(ctx)
    field = f"{where.field}.labels"
    if facts is None or facts.queues is None:
        why = reason or "the cluster's queues are not known yet"
        yield unknown_facts(RULE, cfg.when_unknown, why, field)
        return
    queues = facts.queues
    if named is None:
        label = cfg.kueue_labels[0] if cfg.kueue_labels else "a queue label"
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: this {ctx.kind} asks for GPUs and names no queue",
            fix=(
                f"set {field} {label} to a queue it may use ({_usable(queues, facts, ask)})"
                if cfg.kueue_labels
                else f"label it with a queue it may use ({_usable(queues, facts, ask)})"
            ),
            field=field,
        )
        return
    system, how, queue = named
    if system == "kueue":
        yield from _kueue(pod, ctx, facts, queues, queue, how, ask)
    else:
        yield from _kai(pod, ctx, facts, queues, queue, how, ask)
