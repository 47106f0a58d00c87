"""The webhook configurations, generated from a rule set: what the apiserver sends us.

`gpu-admission rules webhooks --rules manifests/base/rules` prints both configurations. Their rules
come from the workload table (shipped kinds plus the rule set's `workloads:`), their
namespaceSelector from the exempt namespaces, and their `gpu-workload` matchCondition (CEL)
from the same table and from the names the rules use: GPU resources, GPU taint keys, GPU
node-label prefixes and host device paths. So a CRD declared in a rule file is routed, and a
resource name added to `gpuResources` is selected, with no hand edit;
manifests/base/webhooks.yaml is this output for manifests/base/rules, the rules the
ConfigMap deploys (a test keeps them equal).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Iterator
from typing import TypeVar

from webhook.celtext import name_test, q, qlist
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.injection import PREFIXES as INJECTION_PREFIXES
from webhook.engine.sharedmaps import NAME_FORM
from webhook.engine.workloads import Workload, WorkloadTable
from webhook.facts.devicekeys import DEVICE_ENV, SHARING_KEYS
from webhook.facts.dra import IMPLICIT_PREFIX
from webhook.namepatterns import is_pattern
from webhook.ruleset.models import RuleSet
from webhook.ruleset.workloads import LIST_ITEMS, MAP_VALUES

__all__ = ["gpu_workload_condition", "render_webhooks", "sharing_config_map_condition"]

NAMESPACE = "gpu-admission"
# Never sent, whatever the rule set says: the control plane must not wait on a webhook, and
# the webhook must be able to restart while it is down.
ALWAYS_SKIPPED = ("kube-system", NAMESPACE)


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


# --- the two configurations -----------------------------------------------------------------------


def _skipped_namespaces(source: RuleSet) -> list[str]:
    exact = [n for n in source.exemptions.all_namespaces if not is_pattern(n)]
    return list(dict.fromkeys([*ALWAYS_SKIPPED, *exact]))


def _rules_yaml(table: WorkloadTable) -> str:
    groups = table.api_resources()
    out = [
        "      - operations: [CREATE]",
        '        apiGroups: [""]',
        "        apiVersions: [v1]",
        "        resources: [pods]",
        "        scope: Namespaced",
        "      # kubectl debug adds containers to a running pod through this subresource.",
        "      - operations: [UPDATE]",
        '        apiGroups: [""]',
        "        apiVersions: [v1]",
        "        resources: [pods/ephemeralcontainers]",
        "        scope: Namespaced",
    ]
    for (group, versions, scope), resources in groups.items():
        out += [
            "      - operations: [CREATE, UPDATE]",
            f"        apiGroups: [{group or json.dumps(group)}]",
            f"        apiVersions: [{', '.join(versions)}]",
            f"        resources: [{', '.join(resources)}]",
            f"        scope: {scope}",
        ]
    return "\n".join(out)


HEADER = """\
# How the apiserver calls gpu-admission. Generated from the rule set by
#   gpu-admission rules webhooks --rules manifests/base/rules > manifests/base/webhooks.yaml
# so edit the rule files (workloads, gpuResources, exemptions...) and generate again; do not
# edit this file by hand (tests/manifests/test_manifests.py fails when the two differ).
# Both configurations route the same objects, with the same namespaceSelector and
# matchConditions:
#
# - rules: pods on CREATE only (a pod's spec is immutable and the engine judges no pod UPDATE),
#   pods/ephemeralcontainers on UPDATE (kubectl debug: only the added containers are judged,
#   for GPU access), every kind of the workload table on CREATE and UPDATE (a changed pod
#   template). DELETE and other subresources (`kubectl scale` goes to */scale) are never sent.
# - namespaceSelector: never kube-system (a webhook outage must not block the control plane),
#   gpu-admission itself (the webhook must be able to restart while it is down), nor the
#   namespaces the rule set exempts whole by name (kube-public, kube-node-lease and its own
#   exemptions.namespaces). GPU components' namespaces are sent: only their own pods skip the
#   GPU-access rules there, and quota and schedulability hold for every pod.
# - matchConditions (CEL, GA in Kubernetes 1.30): only objects with a pod spec that asks for a
#   GPU, sets a device variable (NVIDIA_VISIBLE_DEVICES, CUDA_, HIP_ or ROCR_VISIBLE_DEVICES),
#   has a privileged container or a hostPath volume, has DRA resource claims, or can land on a
#   GPU node by its own fields (tolerates a GPU taint or every taint, selects GPU node labels,
#   names its node). Privileged and hostPath pods are sent whatever else they hold: on a cluster
#   whose GPU nodes carry no GPU taint they reach GPUs with no toleration, and the webhook's
#   facts show such nodes. Everything else, nearly all of a cluster's traffic, is admitted
#   without a call, so an outage cannot touch non-GPU workloads. The server keeps its own fast
#   path.
# - timeoutSeconds 5 (default 10): an answer takes milliseconds (pure rules over cached cluster
#   facts), so 5 s is only reached when a replica hangs. One request may cost two mutating calls
#   (reinvocation) and one validating call: 15 s at worst, well inside the apiserver's 60 s
#   request timeout, so the caller gets the webhook's failure policy, not a timeout of its own.
# - sideEffects None: the webhook changes nothing outside the AdmissionReview (dryRun is safe).
# - matchPolicy Equivalent: a request through another version of a listed resource (e.g. an
#   older ray.io or kubeflow.org version) is converted and still sent.
# - configmaps.gpu-admission.io (validating only): a CREATE or UPDATE of a ConfigMap holding a
#   GPU-sharing scheduler's device key (NVIDIA_VISIBLE_DEVICES, RUNAI-VISIBLE-DEVICES) that a
#   pod owns or that is named as the scheduler names them, by anyone but the scheduler's binder
#   (gpuSharing.configMapWriters): the webhook refuses such a write when it sets a device list.
"""


def _configuration(kind: str, name: str, path: str, policy: str) -> str:
    """One webhook configuration up to its routing, which both share (`_routing`)."""
    return f"""\
apiVersion: admissionregistration.k8s.io/v1
kind: {kind}
metadata:
  name: gpu-admission
  labels:
    app.kubernetes.io/name: gpu-admission
webhooks:
  - name: {name}
    admissionReviewVersions: [v1]
    sideEffects: None
    timeoutSeconds: 5
{policy}
    matchPolicy: Equivalent
    clientConfig:
      service:
        namespace: gpu-admission
        name: gpu-admission
        path: {path}
        port: 443
"""


_MUTATING = _configuration(
    "MutatingWebhookConfiguration",
    "mutate.gpu-admission.io",
    "/mutate",
    """\
    # Ignore: if gpu-admission is down, GPU pods are admitted unmutated (no added toleration,
    # /dev/shm or probe delays) rather than refused. Every mutation is a convenience the
    # validating webhook or the pod's own failure makes visible; none is a safety boundary.
    failurePolicy: Ignore
    # Another mutating webhook (or a built-in one) may add a container or a GPU after us.
    # Our mutations are idempotent, so a second call changes nothing it already did.
    reinvocationPolicy: IfNeeded""",
)

_VALIDATING = _configuration(
    "ValidatingWebhookConfiguration",
    "validate.gpu-admission.io",
    "/validate",
    """\
    # Fail: the validating rules are the isolation boundary (NVIDIA_VISIBLE_DEVICES, host device
    # nodes, privileged GPU containers); with Ignore, an outage, or a pod that knocks the webhook
    # over, would let exactly those through. The cost is bounded: the matchConditions send only
    # GPU-related objects, kube-system and gpu-admission are never sent, two replicas on
    # different nodes with a PodDisruptionBudget and system-cluster-critical priority keep it
    # up, and a stuck controller retries on its own once the webhook is back.
    failurePolicy: Fail""",
)


def _routing(rules: CompiledRuleSet) -> str:
    namespaces = "".join(f"\n            - {n}" for n in _skipped_namespaces(rules.source))
    condition = "\n".join(
        ("          " + line).rstrip() for line in gpu_workload_condition(rules).splitlines()
    )
    return f"""\
    namespaceSelector:
      matchExpressions:
        - key: kubernetes.io/metadata.name
          operator: NotIn
          values:{namespaces}
    rules:
{_rules_yaml(rules.workloads)}
    matchConditions:
      # An object on its way out (finalizers being removed) creates no pods; skipping it means
      # an outage cannot hold up the deletion of GPU workloads. On CREATE the field is the
      # author's to set (the apiserver clears it only after admission), so it never skips one.
      - name: not-being-deleted
        expression: >-
          request.operation == 'CREATE' || !(type(object) == map && 'metadata' in object
          && type(object.metadata) == map && 'deletionTimestamp' in object.metadata
          && object.metadata.deletionTimestamp != null)
      - name: gpu-workload
        # `object` is the object as the apiserver decoded it: built-in kinds have quantities as
        # strings ("1") and no nulls; CRD objects may keep integers (1), nulls, or any type
        # anywhere. Every access is guarded by the type of what it reads, because an evaluation
        # error makes the apiserver apply failurePolicy (Fail: reject) without calling us.
        # Cost: linear in the object's pod specs x (containers x (env + resource names) +
        # volumes + tolerations), far below the per-object budget of matchConditions.
        expression: |
{condition}
"""


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


def _config_map_entry(rules: CompiledRuleSet) -> str:
    """The validating webhook on ConfigMap writes: only the sharing scheduler's binder may put
    a device list in a pod's ConfigMap."""
    namespaces = "".join(f"\n            - {n}" for n in _skipped_namespaces(rules.source))
    writers = qlist(rules.source.gpu_sharing.config_map_writers)
    condition = "\n".join(
        ("          " + line).rstrip() for line in sharing_config_map_condition().splitlines()
    )
    return f"""\
  # A shared container's NVIDIA_VISIBLE_DEVICES comes from a ConfigMap the GPU-sharing
  # scheduler's binder fills at bind time and the kubelet reads at every container start: a
  # device key written there by anyone else (`all`) would reach every GPU of the node. The
  # binder's own writes are never sent (gpuSharing.configMapWriters), so an outage never holds
  # up binding; any other write of a device key into such a ConfigMap is, and is refused.
  - name: configmaps.gpu-admission.io
    admissionReviewVersions: [v1]
    sideEffects: None
    timeoutSeconds: 5
    failurePolicy: Fail
    matchPolicy: Equivalent
    clientConfig:
      service:
        namespace: gpu-admission
        name: gpu-admission
        path: /validate
        port: 443
    namespaceSelector:
      matchExpressions:
        - key: kubernetes.io/metadata.name
          operator: NotIn
          values:{namespaces}
    rules:
      - operations: [CREATE, UPDATE]
        apiGroups: [""]
        apiVersions: [v1]
        resources: [configmaps]
        scope: Namespaced
    matchConditions:
      - name: not-the-sharing-scheduler
        expression: >-
          !(request.userInfo.username in {writers})
      - name: sharing-config-map
        expression: |
{condition}
"""


def render_webhooks(rules: CompiledRuleSet) -> str:
    """Both webhook configurations as one YAML stream, comments included."""
    routing = _routing(rules)
    return f"{HEADER}{_MUTATING}{routing}---\n{_VALIDATING}{routing}{_config_map_entry(rules)}"
