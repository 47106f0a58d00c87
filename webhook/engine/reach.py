"""Whether a pod can land on a GPU node: the scope of the GPU-access rules.

A container that asks for no GPU is harmless on a node without GPUs. On a GPU node it can reach
the devices through its image's `NVIDIA_VISIBLE_DEVICES`, privileged mode or a host mount, so
the isolation rules care about every pod that can get there: one that asks for a GPU, tolerates
a GPU taint, selects GPU node labels, names its node, or (when the facts show GPU nodes that
carry no GPU taint at all) any pod whose tolerations cover some GPU node's taints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.engine.accounting import required_terms
from webhook.engine.context import Context
from webhook.engine.podviews import PodView
from webhook.facts.model import NodeIndex

__all__ = [
    "can_reach_gpu_nodes",
    "gpu_node_taints",
    "reach_unknown",
    "tolerates_taint",
    "untainted_gpu_nodes",
]

# Operators that draw a pod towards nodes with a label (NotIn/DoesNotExist push it away).
_TOWARDS = frozenset({"In", "Exists", "Gt", "Lt"})
Taint = tuple[str, str, str]
_ANY_VALUE = "\x00any"  # never a real taint value (label values are [A-Za-z0-9._-])


def tolerates_taint(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """The scheduler's ToleratesTaint: key, operator (Equal/Exists) and effect. A taint value
    of `_ANY_VALUE` (a configured taint, whose value the cluster picks) matches any Equal."""
    key, value, effect = taint
    t_effect = toleration.get("effect")
    if t_effect not in (None, "") and t_effect != effect:
        return False
    t_key = toleration.get("key")
    op = toleration.get("operator") or "Equal"
    if t_key in (None, ""):
        return op == "Exists"  # an empty key with Exists tolerates everything
    if t_key != key:
        return False
    if op == "Exists":
        return True
    return op == "Equal" and (value == _ANY_VALUE or (toleration.get("value") or "") == value)


def _tolerates_all(tolerations: Sequence[Mapping[str, Any]], taints: Iterable[Taint]) -> bool:
    return all(any(tolerates_taint(t, taint) for t in tolerations) for taint in taints)


# One entry: node sets are replaced whole when a node changes, so the last one is the live one.
_last: tuple[NodeIndex, frozenset[tuple[Taint, ...]]] | None = None


def gpu_node_taints(nodes: NodeIndex) -> frozenset[tuple[Taint, ...]]:
    """The distinct taint sets of schedulable GPU nodes (a handful, whatever the node count)."""
    global _last
    if _last is not None and _last[0] is nodes:
        return _last[1]
    found = frozenset(
        tuple(sorted(n.taints)) for n in nodes.nodes if n.gpus and not n.unschedulable
    )
    _last = (nodes, found)
    return found


def untainted_gpu_nodes(nodes: NodeIndex, taint_keys: frozenset[str] = frozenset()) -> bool:
    """Whether some GPU node carries none of these taint keys (none at all, by default): a pod
    can then reach it with no toleration the rule set knows of, so its bytes may hold no
    marker the fast path looks for (e.g. AKS taints GPU pools `sku=gpu`)."""
    global _last_open
    if _last_open is not None and _last_open[0] is nodes and _last_open[1] == taint_keys:
        return _last_open[2]  # every plain pod asks: once per node set and rule set
    found = any(
        not any(key in taint_keys for key, _, _ in taints) for taints in gpu_node_taints(nodes)
    )
    _last_open = (nodes, taint_keys, found)
    return found


_last_open: tuple[NodeIndex, frozenset[str], bool] | None = None


def _selects_gpu_labels(pod: PodView, prefixes: tuple[str, ...]) -> bool:
    selector = pod.spec.get("nodeSelector")
    if isinstance(selector, dict) and any(
        isinstance(k, str) and k.startswith(prefixes) for k in selector
    ):
        return True
    return any(
        isinstance(e.get("key"), str)
        and e["key"].startswith(prefixes)
        and e.get("operator") in _TOWARDS
        for term in required_terms(pod)
        for e in term
    )


def can_reach_gpu_nodes(pod: PodView, ctx: Context) -> bool:
    """Whether the pod may run on a node with GPUs (when in doubt: yes).

    Without cluster facts, GPU nodes are taken to carry the taints the rule set's
    gpu-tolerations names (the documented practice); with facts, their real taints count.
    """
    if pod.asks_gpu:
        return True
    raw = pod.spec.get("tolerations")
    tolerations = [t for t in raw if isinstance(t, dict)] if isinstance(raw, list) else []
    for spec, _ in ctx.rules.tolerations:  # the GPU taints the rule set knows
        taint = (spec.key, _ANY_VALUE, spec.effect)
        if any(tolerates_taint(t, taint) for t in tolerations):
            return True
    if _selects_gpu_labels(pod, ctx.rules.gpu_label_prefixes):
        return True
    facts = ctx.facts
    node_name = pod.spec.get("nodeName")
    if node_name:
        # nodeName skips the scheduler and its NoSchedule taints: only the node itself tells.
        node = facts.nodes.node(str(node_name)) if facts is not None else None
        return node is None or bool(node.gpus) or _selects_gpu_labels_of(node.labels, ctx)
    if facts is None:
        return False
    return any(_tolerates_all(tolerations, taints) for taints in gpu_node_taints(facts.nodes))


def _selects_gpu_labels_of(labels: Mapping[str, str], ctx: Context) -> bool:
    return any(k.startswith(ctx.rules.gpu_label_prefixes) for k in labels)


def reach_unknown(ctx: Context) -> str:
    """Why the facts cannot tell that a pod `can_reach_gpu_nodes` said no to stays off GPU
    nodes ("" when they can): they are older than the rules allow, or not read yet, so a GPU
    node that carries no GPU taint (any pod lands there) may be missing from them. Facts that
    show one answer yes whatever their age; no facts at all (an offline audit) take GPU nodes
    to carry the GPU taints, as documented."""
    facts = ctx.facts
    if facts is None:
        return ""
    age = facts.age_seconds
    limit = ctx.rules.max_staleness_seconds
    if age is None or age <= limit:
        return ""
    if age == float("inf"):
        return "cluster facts are not read yet, so untainted GPU nodes are not known"
    return (
        f"cluster facts are {int(age)}s old (limit {limit}s; API server unreachable?), so "
        "untainted GPU nodes are not known"
    )
