"""Pods that no node could ever run: too many GPUs, a GPU product or MIG profile that isn't
there, a GPU resource no node offers. The message lists what the cluster does have.

A resource name a DeviceClass stands for (its `extendedResourceName`, or the implicit
`deviceclass.resource.kubernetes.io/<class>`) is served by DRA devices that no node lists in
its allocatable: such a name is never "offered by no node", nor judged against node sizes.
DRA claims themselves are not judged here (no facts say how many devices a node has)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from typing import Any

from webhook.engine.accounting import pod_gpus, required_terms
from webhook.engine.checks.trust import trusted_facts, unknown_facts
from webhook.engine.claims import dra_resource_names
from webhook.engine.context import Context
from webhook.engine.dranodes import dra_gpus_on
from webhook.engine.findings import Finding
from webhook.engine.podviews import PodView
from webhook.facts.model import Facts, Node
from webhook.facts.nodematch import expr_matches
from webhook.quantity import Amount, positive, show
from webhook.ruleset.models import RuleSettings

__all__ = ["Prepared", "cluster_shapes", "gpu_schedulable", "prepare", "why_not_whole_node"]

RULE = "gpu-schedulable"

# The GPU node label prefixes; the node shapes the cluster can create on demand; whether "no
# node fits" is a fact (provisioning declared); whether the cluster's autoscalers count.
Prepared = tuple[tuple[str, ...], tuple[Node, ...], bool, bool]


def prepare(settings: RuleSettings) -> Prepared:
    """gpu-schedulable made ready once per rule set: declared node shapes as node values."""
    sched = settings.gpu_schedulable
    provisionable = tuple(
        Node(f"provisionable {shape.name}", dict(shape.labels), dict(shape.gpus))
        for shape in sched.provisionable
    )
    known = sched.autoscaling == "none" or bool(sched.provisionable)
    return tuple(sched.gpu_label_prefixes), provisionable, known, sched.cluster_autoscalers


def cluster_shapes(facts: Facts, ctx: Context) -> tuple[Node, ...]:
    """The shapes the cluster's autoscalers can create, read only from the namespaces the rules
    trust (`cluster.provisioningNamespaces`): a tenant's own Cluster API object shapes nothing.
    Empty when unknown, when they cannot be told, or when the rules ignore the autoscalers."""
    found = facts.provisionable
    if found is None or not ctx.rules.cluster_autoscalers:
        return ()
    return found.shapes(ctx.rules.provisioning_namespaces) or ()


def _is_gpu_label(key: Any, prefixes: list[str]) -> bool:
    return isinstance(key, str) and any(key.startswith(p) for p in prefixes)


_Terms = list[list[dict[str, Any]]]


def _selected(
    pod: PodView, nodes: list[Node], prefixes: list[str]
) -> tuple[list[Node], dict[str, Any], _Terms]:
    """Nodes whose GPU labels satisfy the pod's nodeSelector and required affinity, with the
    GPU part of each (`_selector_text` words it, for a finding only).

    Only GPU labels are judged: the facts may not hold every zone or pool label, and a false
    "never schedules" is worse than a missed one.
    """
    raw = pod.spec.get("nodeSelector")
    selector: dict[str, Any] = raw if isinstance(raw, dict) else {}
    wanted = {k: v for k, v in selector.items() if _is_gpu_label(k, prefixes)}
    gpu_terms = [
        [e for e in t if _is_gpu_label(e.get("key"), prefixes)] for t in required_terms(pod)
    ]
    # Terms are ORed: one with no GPU expression may match any node as far as we can tell.
    terms = gpu_terms if gpu_terms and all(gpu_terms) else []
    chosen = [
        n
        for n in nodes
        if all(n.labels.get(k) == v for k, v in wanted.items())
        and (not terms or any(all(expr_matches(e, n.labels) for e in t) for t in terms))
    ]
    return chosen, wanted, terms


def _selector_text(wanted: dict[str, Any], terms: _Terms) -> str:
    parts = [f"{k}={v}" for k, v in wanted.items()]
    for t in terms:
        parts.append(
            " and ".join(
                f"{e.get('key')} {e.get('operator')} {e.get('values') or ''}".strip() for e in t
            )
        )
    return "; ".join(parts)


def _values(nodes: list[Node], key: str) -> str:
    found = sorted({n.labels[key] for n in nodes if key in n.labels})
    return ", ".join(found) if found else "none"


# How a finding names what was searched: a fact when provisioning is declared, else today's.
_NODE = {True: "node, existing or provisionable,", False: "existing node"}
_HINT = {True: "", False: " (a pool at zero? see provisionable)"}
_DECLARE = (
    ". If GPU nodes are created on demand (Karpenter, cluster-autoscaler, GKE node "
    "auto-provisioning), list their shapes in gpu-schedulable.provisionable so this is checked; "
    "with autoscaling: none it is denied"
)


def _one_slice_each(ask: dict[str, Amount], patterns: list[str], field: str) -> Iterator[Finding]:
    """Asks of more than one of a resource whose device plugin hands out one slice per pod
    (`singleDeviceResources`): such a pod is never granted, whatever the cluster holds."""
    for name, amount in ask.items():
        if amount > 1 and any(fnmatch.fnmatchcase(name, p) for p in patterns):
            yield Finding(
                rule=RULE,
                summary=f"{RULE}: pod asks {show(amount)} {name}; the device plugin grants 1",
                fix=f"ask for 1 {name} (shared GPUs are handed out one slice per pod)",
                field=field,
            )


def _shapes(facts: Facts, ctx: Context) -> tuple[list[Node], bool]:
    """Every node shape the pod could get: the existing GPU pools and those the cluster can
    create; and whether a shape missing from them is a fact. When the cluster's provisioning
    is not declared, a shape no node has may still come (an autoscaled pool at zero): that
    absence is a warning, never a denial."""
    from_cluster = cluster_shapes(facts, ctx)
    nodes = [
        *facts.nodes.pools(ctx.rules.gpu_label_prefixes),
        *ctx.rules.provisionable,
        *from_cluster,
    ]
    # The cluster's autoscaler objects make absence a fact only when they show some GPU shape:
    # Karpenter with no GPU NodePool says nothing about, say, a managed GPU group at zero.
    return nodes, ctx.rules.provisioning_known or bool(from_cluster)


def gpu_schedulable(pod: PodView, ctx: Context) -> Iterator[Finding]:
    cfg = ctx.settings.gpu_schedulable
    ask = pod_gpus(pod)
    field = f"{pod.field_path}.containers"
    yield from _one_slice_each(ask, cfg.single_device_resources, field)
    facts, reason = trusted_facts(ctx)
    if facts is None:
        if ask:
            yield unknown_facts(RULE, cfg.when_unknown, reason, field)
        return
    if not ask:
        return
    nodes, known = _shapes(facts, ctx)
    by_dra = dra_resource_names(facts.dra)
    for name in ask:
        if name in by_dra:
            continue
        if not any(positive(n.gpus.get(name, 0)) for n in nodes):
            offered = sorted({r for n in nodes for r, v in n.gpus.items() if positive(v)})
            yield Finding(
                rule=RULE,
                summary=f"{RULE}: no {_NODE[known]} offers {name}" + _HINT[known],
                fix=(
                    f"ask for a resource the cluster has: {', '.join(offered) or 'none'}"
                    + (" (MIG profiles differ per GPU pool)" if "mig-" in name else "")
                    + ("" if known else _DECLARE)
                ),
                field=field,
                advisory=not known,
            )
            return
    chosen, wanted, terms = _selected(pod, nodes, cfg.gpu_label_prefixes)
    if not chosen:
        selector = _selector_text(wanted, terms)
        keys = sorted({s.split("=")[0].split(" ")[0] for s in selector.split("; ") if s})
        have = "; ".join(f"{k}: {_values(nodes, k)}" for k in keys)
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: no {_NODE[known]} matches {selector}" + _HINT[known],
            fix=f"select labels that exist. Nodes have {have}" + ("" if known else _DECLARE),
            field=f"{pod.field_path}.nodeSelector",
            advisory=not known,
        )
        return
    for name, amount in ask.items():
        if name in by_dra:
            continue  # DRA devices: how many a node has is in no node's allocatable
        best = max((n.gpus.get(name, 0) for n in chosen), default=0)
        if amount > best:
            selector = _selector_text(wanted, terms)
            where = f" among nodes matching {selector}" if selector else ""
            yield Finding(
                rule=RULE,
                summary=(
                    f"{RULE}: pod asks {show(amount)} {name}; the largest node{where} "
                    f"has {show(best)}"
                ),
                fix=(
                    f"ask for at most {show(best)} {name} per pod and spread the work over "
                    "more pods (e.g. a multi-node job)"
                ),
                field=field,
            )


def why_not_whole_node(pod: PodView, ctx: Context) -> str | None:
    """`_why_not_whole_node`, worked out once per pod spec: every host path or privileged
    container that reaches GPUs asks, and the answer walks the cluster's nodes."""
    known = pod.whole_node
    if known is None:
        known = pod.whole_node = (_why_not_whole_node(pod, ctx),)
    return known[0]


def _why_not_whole_node(pod: PodView, ctx: Context) -> str | None:
    """None when the pod's GPU ask fills every node shape that can run it, so no other
    tenant's GPU can share its node; else why that is not known to hold, for a message.

    The shapes are the cluster's GPU pools and the ones it can create, as for schedulability,
    each with the GPUs DRA serves there (`dranodes`: in no allocatable, so ResourceSlices must
    be known). Provisioning counts as known only as the rule set declares it (`autoscaling:
    none`, or its `provisionable` shapes): the autoscaler objects the cluster shows add their
    shapes, but one seen says nothing of a pool the API does not show (a managed group at zero).
    """
    ask = {name: amount for name, amount in pod_gpus(pod).items() if positive(amount)}
    if not ask:
        return "it asks for no GPU"
    if pod.spec.get("nodeName"):
        return "it names its node (nodeName), which may be of any shape"
    facts, _ = trusted_facts(ctx)
    if facts is None:
        return "no cluster facts show the nodes it can run on"
    from_cluster = cluster_shapes(facts, ctx)
    if not ctx.rules.provisioning_known:
        return "the cluster may create GPU nodes of shapes not known (provisioning not declared)"
    dra = facts.dra
    devices = dra.node_devices if dra is not None else None
    if dra is None or devices is None:
        return "the GPUs DRA drivers publish on each node are not known (ResourceSlices)"
    served = dra_resource_names(dra)
    # Every node, cordoned ones too: a cordon is lifted, and a DaemonSet's pods ignore it.
    nodes = [*facts.nodes.nodes, *ctx.rules.provisionable, *from_cluster]
    chosen, _, _ = _selected(pod, nodes, ctx.settings.gpu_schedulable.gpu_label_prefixes)
    fits = False
    for node in chosen:
        by_dra, drivers = dra_gpus_on(node.name, dra, devices, ctx.rules)
        # A name the node's allocatable lacks lands on its DRA devices when a class serves it.
        on_dra = sum(a for r, a in ask.items() if r in served and not positive(node.gpus.get(r, 0)))
        plugin = {r: a for r, a in ask.items() if r not in served or positive(node.gpus.get(r, 0))}
        if on_dra > by_dra or any(node.gpus.get(r, 0) < a for r, a in plugin.items()):
            continue  # the pod cannot run there
        fits = True
        for name, count in node.gpus.items():
            if positive(count) and ask.get(name, 0) < count:
                return (
                    f"it does not fill its node: a node it can run on has {show(count)} {name}, "
                    f"the pod asks {show(ask.get(name, 0))}"
                )
        if by_dra > on_dra:
            return (
                f"it does not fill its node: a node it can run on has {by_dra} GPUs served "
                f"through DRA ({', '.join(drivers)}), the pod asks {show(on_dra)} of them"
            )
    return None if fits else "no known node shape can run it"
