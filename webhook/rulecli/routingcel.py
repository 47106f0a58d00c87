"""The webhooks' matchConditions (CEL) for a rule set: the apiserver sends only what they select."""

# The pod-spec paths come from the workload table (shipped kinds plus the rule set's
# `workloads:`), the names from the rules: GPU resources, GPU taint keys, GPU node-label
# prefixes and host device paths. So a CRD declared in a rule file is routed, and a resource
# name added to `gpuResources` is selected, with no hand edit. webhookyaml.py puts these
# conditions into the webhook configurations.

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import TypeVar

from webhook.celtext import name_test, q, qlist
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.injection import PREFIXES as INJECTION_PREFIXES
from webhook.engine.sharedmaps import NAME_FORM
from webhook.engine.workloads import Workload, WorkloadTable
from webhook.facts.devicekeys import DEVICE_ENV, SHARING_KEYS
from webhook.facts.dra import IMPLICIT_PREFIX
from webhook.ruleset.models import RuleSet
from webhook.ruleset.workloads import LIST_ITEMS, MAP_VALUES

__all__ = ["gpu_workload_condition", "sharing_config_map_condition"]

_K = TypeVar("_K", bound=Hashable)


# --- where the pod specs are --------------------------------------------------------------------


def _select(root: str, fields: Iterable[str]) -> tuple[str, list[str]]:
    """`root.a.b` and the guards that make reading it safe: each step is an object that has
    the next field. A CRD may keep null, a string or a number where another kind keeps an
    object, and an evaluation error makes the apiserver apply the failure policy (reject)
    before the webhook is even called, so no step is taken on faith."""
    expr, guards = root, []
    for f in fields:
        guards.append(f"type({expr}) == map && {q(f)} in {expr}")
        expr = f"{expr}.{f}"
    return expr, guards


def _wrap(parts: list[str], joiner: str, indent: str) -> str:
    """`parts` joined, one per line once the whole would pass 90 columns."""
    flat = joiner.join(parts)
    if len(indent) + len(flat) <= 90:
        return flat
    return f"\n{indent}{joiner.lstrip()}".join(parts)


def _kind_test(workloads: Iterable[Workload]) -> str:
    """True for objects of these kinds: a path is only read in the kinds that declare it."""
    by_group: dict[str, list[str]] = {}
    for w in workloads:
        by_group.setdefault(w.group, []).append(w.kind)
    parts = []
    for group, kinds in by_group.items():
        version = (
            "object.apiVersion == 'v1'"
            if not group
            else f"object.apiVersion.startsWith({q(group + '/')})"
        )
        kind = (
            f"object.kind == {q(kinds[0])}" if len(kinds) == 1 else f"object.kind in {qlist(kinds)}"
        )
        parts.append(f"{version} && {kind}")
    return parts[0] if len(parts) == 1 else "\n    || ".join(f"({p})" for p in parts)


def _collect(
    segments: tuple[str, ...], kinds: list[str] | tuple[str, ...] = (), root: str = "object"
) -> str:
    """A CEL list of what the path reaches in `root` ([] where the object has no such field).

    Multi-line for long paths; lines after the first are indented by four spaces.
    """
    wild = next((i for i, s in enumerate(segments) if s in (LIST_ITEMS, MAP_VALUES)), None)
    if wild is None:
        value, guards = _select(root, segments)
        guards = [*kinds, *guards, f"type({value}) == map"]
        return f"{_wrap(guards, ' && ', '    ')}\n    ? [{value}] : []"
    outer, guards = _select(root, segments[:wild])
    rest = segments[wild + 1 :]
    if segments[wild] == LIST_ITEMS:
        guards = [*kinds, *guards, f"type({outer}) == list"]
        item, inner = _select("x", rest)
        inner = [*inner, f"type({item}) == map"] if rest else ["type(x) == map"]
        cond = _wrap(inner, " && ", "        ")
        picked = f"dyn({outer})\n      .filter(x, {cond})\n      .map(x, {item})"
    else:  # a map: its keys are iterated, its values read through them
        guards = [*kinds, *guards, f"type({outer}) == map"]
        item, inner = _select(f"{outer}[k]", rest)
        inner = [*inner, f"type({item}) == map"]
        cond = _wrap(inner, " && ", "        ")
        picked = f"dyn({outer})\n      .filter(k, {cond})\n      .map(k, {item})"
    return f"{_wrap(guards, ' && ', '    ')}\n    ? {picked}\n    : []"


def _by_path(paths: Iterator[tuple[Workload, _K]]) -> dict[_K, list[Workload]]:
    """Each path once, with the kinds that keep pod specs there."""
    out: dict[_K, list[Workload]] = {}
    for workload, path in paths:
        kinds = out.setdefault(path, [])
        if workload not in kinds:
            kinds.append(workload)
    return out


def _names(kinds: Iterable[Workload]) -> str:
    return ", ".join(w.kind for w in kinds)


# --- what makes a pod spec worth sending ----------------------------------------------------------


class _Names:
    """The names the rule set (base and overrides) uses, as the CEL needs them."""

    def __init__(self, rules: CompiledRuleSet) -> None:
        source: RuleSet = rules.source
        # Devices of a DRA class asked as a plain resource (Kubernetes 1.34+): whether the
        # class hands out GPUs only the webhook's facts can tell, so every one is sent.
        self.gpu_resources = [*source.gpu_resources, IMPLICIT_PREFIX + "*"]
        self.taint_keys = sorted(rules.taint_keys)
        prefixes = list(source.rules.gpu_schedulable.gpu_label_prefixes)
        for o in source.overrides:
            sched = o.rules.get("gpu-schedulable", {})
            prefixes += [p for p in sched.get("gpuLabelPrefixes", []) if isinstance(p, str)]
        self.label_prefixes = list(dict.fromkeys(prefixes))
        self.inline = list(dict.fromkeys(k for w in rules.workloads.kinds for k in w.inline))
        self.schedulers = list(source.gpu_sharing.schedulers)


# Total by construction: a field is read only after `'f' in m` on a value whose type() is map,
# a list is ranged over only once type() says list (and inside dyn(), which cel-cpp's checker
# wants of a range whose static type it cannot know), a string method is called only on a
# string. Any JSON at any path evaluates to true or false, never to an error.


def _has(m: str, f: str, kind: str = "") -> str:
    """`m` (known to be a map) has field `f`, of CEL type `kind` when given."""
    test = f"{q(f)} in {m}"
    return f"{test} && type({m}.{f}) == {kind}" if kind else test


def _items(m: str, f: str) -> str:
    """The list in field `f` of map `m`, or [] when it is absent or not a list."""
    return f"({_has(m, f, 'list')} ? dyn({m}.{f}) : [])"


def _zero(v: str) -> str:
    """A quantity that is zero as written: "0" or the number 0 (no GPU ask)."""
    return (
        f"((type({v}) == string && {v} == '0') || (type({v}) == int && {v} == 0)"
        f" || (type({v}) == uint && {v} == 0u) || (type({v}) == double && {v} == 0.0))"
    )


def _container_test(resources: str, names: _Names) -> str:
    gpu = name_test("r", names.gpu_resources)
    res = f"c.{resources}"
    amount = f"{res}[w][r]"
    return f"""(
                // (a) a GPU resource with an amount other than zero, in requests or limits (a
                //     value of another type than a quantity goes too: the webhook names it)
                ({_has("c", resources, "map")} && ['requests', 'limits'].exists(w,
                  w in {res} && type({res}[w]) == map
                  && dyn({res}[w]).exists(r, type(r) == string && ({gpu})
                    && !{_zero(amount)})))
                // (b) a device variable (NVIDIA_VISIBLE_DEVICES; CUDA's, HIP's, ROCm's
                //     lists), whatever its value, or through valueFrom; or a mount in
                //     the toolkit's volume-mount device list
                || {_items("c", "env")}.exists(e, type(e) == map
                  && {_has("e", "name", "string")} && e.name in {qlist(DEVICE_ENV)})
                // (c) privileged mode: every device node of the host it lands on (an
                //     untainted GPU node needs no toleration)
                || ({_has("c", "securityContext", "map")}
                  && {_has("c.securityContext", "privileged", "bool")}
                  && c.securityContext.privileged)
                || {_items("c", "volumeMounts")}.exists(m, type(m) == map
                  && {_has("m", "mountPath", "string")}
                  && m.mountPath.contains('nvidia-container-devices'))
              )"""


def _pod_test(names: _Names) -> str:
    labels = qlist(names.label_prefixes)
    keys = qlist(names.taint_keys)
    inline = qlist(names.inline)
    node_affinity, must = (
        "p.affinity.nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
    )
    required = f"{node_affinity}.{must}"
    schedulers = qlist(names.schedulers)
    return f"""(
              {_items("p", "containers")}
              + {_items("p", "initContainers")}
              + {_items("p", "ephemeralContainers")}
              // Keys that hold one container each (KServe's model and framework shortcuts).
              + {inline}.filter(k, k in p).map(k, p[k])
            ).exists(c, type(c) == map && {_container_test("resources", names)})
            // (d) a hostPath volume, whatever its path: one may reach GPUs (device
            //     nodes, the host's root, a runtime's socket), and the facts tell an
            //     untainted GPU node it may land on (anything but null goes too)
            || {_items("p", "volumes")}.exists(v, type(v) == map
              && 'hostPath' in v && v.hostPath != null)
            // (e) a way onto GPU nodes: a toleration of a GPU node taint or of every taint (no
            //     key), GPU node labels in nodeSelector or required node affinity, or nodeName.
            //     Such a pod gets NVIDIA_VISIBLE_DEVICES=void in its non-GPU containers, and
            //     privileged mode or envFrom are judged in it.
            || {_items("p", "tolerations")}.exists(t, type(t) == map && (
              ({_has("t", "key", "string")} && t.key in {keys})
              || ((!('key' in t) || t.key == null || (type(t.key) == string && t.key == ''))
                && {_has("t", "operator", "string")} && t.operator == 'Exists')))
            || ({_has("p", "nodeSelector", "map")} && dyn(p.nodeSelector).exists(k,
              type(k) == string && {labels}.exists(x, k.startsWith(x))))
            || ({_has("p", "affinity", "map")} && {_has("p.affinity", "nodeAffinity", "map")}
              && {_has(node_affinity, must, "map")}
              && {_items(required, "nodeSelectorTerms")}.exists(term, type(term) == map
                && {_items("term", "matchExpressions")}.exists(e, type(e) == map
                  && {_has("e", "key", "string")} && {labels}.exists(x, e.key.startsWith(x)))))
            || ('nodeName' in p && p.nodeName != null
              && (type(p.nodeName) != string || p.nodeName != ''))
            // (f) DRA: resource claims, whose device class only the webhook's facts can tell
            //     (anything but a list or null there goes too: the webhook names it)
            || ('resourceClaims' in p && (type(p.resourceClaims) == list
              ? size(p.resourceClaims) > 0 : p.resourceClaims != null))
            // (g) a GPU-sharing scheduler, which gives part of a GPU through annotations
            || ({_has("p", "schedulerName", "string")} && p.schedulerName in {schedulers})"""


def gpu_workload_condition(rules: CompiledRuleSet) -> str:
    """The CEL of the `gpu-workload` matchCondition for this rule set."""
    table = rules.workloads
    names = _Names(rules)
    specs = _by_path((w, p) for w in table.kinds for p in w.spec_paths)
    lists = ",\n".join(
        f"  // {_names(kinds)}\n  "
        + _collect(path, [f"({_kind_test(kinds)})"]).replace("\n", "\n  ")
        for path, kinds in specs.items()
    )
    expr = f"""// 1. The pod specs in the object, at every path of its kind in the workload table
//    (webhook/ruleset/workloads.py and the rule set's `workloads:`); a path the object
//    does not have, or of another shape, adds an empty list. CEL has no flatten: a list
//    of lists.
type(object) == map && {_has("object", "kind", "string")}
&& {_has("object", "apiVersion", "string")} && ([
{lists}
]
// 2. Does any pod spec need gpu-admission?
.exists(specs, specs.exists(p, type(p) == map && {_pod_test(names)}
))"""
    lone = _by_path((w, where) for w in table.kinds for where in w.container_paths)
    for (path, key), kinds in lone.items():
        collect = _collect(path, [f"({_kind_test(kinds)})"])
        expr += f"""
// 3. {_names(kinds)}: a container outside any pod spec, its resources under `{key}`
|| ({collect}).exists(c, type(c) == map && {_container_test(key, names)})"""
    return expr + _injection_test(table) + ")"


def _injection_test(table: WorkloadTable) -> str:
    """Device-injection annotations in the metadata beside any pod spec (engine.injection):
    a node plugin adds the devices and mounts they list, so such a pod is sent whatever else
    it holds."""
    metas = _by_path(
        (w, (*p[:-1], "metadata"))
        for w in table.kinds
        for p in w.spec_paths
        if p and p[-1] not in (LIST_ITEMS, MAP_VALUES)
    )
    lists = ",\n".join(
        f"  // {_names(kinds)}\n  "
        + _collect(path, [f"({_kind_test(kinds)})"]).replace("\n", "\n  ")
        for path, kinds in metas.items()
    )
    return f"""
// 4. Device-injection annotations (GKE's NRI device injector, the NRI plugins' devices, mounts
//    and CDI devices) in the metadata beside a pod spec.
|| ([
{lists}
].exists(ms, ms.exists(m, type(m) == map && {_has("m", "annotations", "map")}
  && dyn(m.annotations).exists(k, type(k) == string
    && {qlist(list(INJECTION_PREFIXES))}.exists(x, k.startsWith(x))))))"""


# --- ConfigMaps a GPU-sharing scheduler writes ---------------------------------------------------


def _owned_or_named(o: str) -> str:
    """CEL: `o` (object or oldObject) is a ConfigMap a pod owns, or named as a sharing
    scheduler names them."""
    meta = f"{o}.metadata"
    return (
        f"(type({o}) == map && {_has(o, 'metadata', 'map')}\n"
        f"  && ({_items(meta, 'ownerReferences')}.exists(r, type(r) == map\n"
        f"      && {_has('r', 'kind', 'string')} && r.kind == 'Pod'\n"
        f"      && {_has('r', 'apiVersion', 'string')} && r.apiVersion == 'v1')\n"
        f"    || ({_has(meta, 'name', 'string')} && {meta}.name.matches({q(NAME_FORM)}))))"
    )


def sharing_config_map_condition() -> str:
    """The CEL of the `sharing-config-map` matchCondition: a ConfigMap write that holds a
    sharing scheduler's device key, in a ConfigMap that is (or was) a pod's or so named."""
    keys = qlist(SHARING_KEYS)
    return f"""// A device key a sharing scheduler's binder writes (engine.sharedmaps)...
type(object) == map && {_has("object", "data", "map")}
&& {keys}.exists(k, k in object.data)
// ...in a ConfigMap a pod owns or named `<prefix>-shared-gpu-<n>` (now or before)
&& ({_owned_or_named("object")}
  || {_owned_or_named("oldObject")})"""
