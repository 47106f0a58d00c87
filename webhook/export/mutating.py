"""MutatingAdmissionPolicies (admissionregistration.k8s.io/v1, GA in Kubernetes 1.36) for the
mutations CEL can make exactly as the webhook does, as JSON patches.

Each policy patches the GPU pod specs the webhook would patch: pod specs of mutable kinds
that ask for a GPU, on CREATE and (controllers) on an UPDATE that changed them. Like the
webhook's, the patches are idempotent: run on their own output they add nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhook.engine.compiled import CompiledRules, CompiledRuleSet
from webhook.engine.decision import Mode
from webhook.export.cel import name_test, q, qlist
from webhook.export.scope import (
    API_VERSION,
    GROUP_SUFFIX,
    LABELS,
    RULES_ANNOTATION,
    LeftOut,
    exempt_conditions,
    match_constraints,
    namespace_selector,
    pod_variables,
    skipped,
)
from webhook.export.validations import gpu_name

__all__ = ["MUTATIONS_LEFT_OUT", "PROBE_HANDLERS", "mutating", "patch_op"]

# The probe handlers a startupProbe copies: the engine's own list (`checks.probes`) is
# private, so the same four are named here; the agreement tests compare the results.
PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


def patch_op(path: str, value: str) -> str:
    """One JSONPatch `add` in the apiserver's CEL (a typed literal: always spelled this way)."""
    return f"JSONPatch{{op: 'add', path: {path}, value: {value}}}"


def _gpu_pods(body: str) -> str:
    """`body` (a CEL list of patches for pod `p`) for each pod spec the webhook patches."""
    return (
        "variables.pods.filter(p, p.s.mutable && p.cs.exists(r, r.asks))\n"
        f"  .map(p, {body}).flatten()"
    )


def _requests_to_limits(compiled: CompiledRules) -> str:
    """A GPU only in requests is copied into limits (`gpu-requests-limits.fix`)."""
    missing = f"r.req.map(n, n).filter(n, {gpu_name(compiled, 'n')} && !(n in r.lim)).sort()"
    limits = "r.ptr + '/' + r.key + '/limits'"
    each = patch_op(limits + " + '/' + jsonpatch.escapeKey(n)", "r.req[n]")
    per_container = (
        f"[{missing}].map(m, size(m) == 0 ? [] :\n"
        f"      (size(r.lim) == 0 ? [{patch_op(limits, '{}')}] : [])\n"
        f"      + m.map(n, {each}))"
        "[0]"
    )
    return _gpu_pods(f"p.cs.map(r, {per_container}).flatten()")


def _tolerates(t: str, key: str, effect: str) -> str:
    """The existing toleration `t` already tolerates every taint with this key and effect."""
    test = (
        f"has({t}.operator) && {t}.operator == 'Exists'"
        f" && (!has({t}.key) || {t}.key == '' || {t}.key == {q(key)})"
        f" && (!has({t}.effect) || {t}.effect == '' || {t}.effect == {q(effect)})"
    )
    return test + (f" && !has({t}.tolerationSeconds)" if effect == "NoExecute" else "")


def _tolerations(compiled: CompiledRules) -> str:
    """The configured toleration of each GPU resource the pod asks for, unless one there
    already covers it (an earlier added one of the same key and effect included)."""
    gpu = gpu_name(compiled, "n")
    positive = "sign(quantity(string(n in r.lim ? r.lim[n] : r.req[n]))) > 0"
    asked = (
        "p.cs.filter(r, r.asks).map(r, (r.lim.map(n, n) + r.req.map(n, n)"
        f".filter(n, !(n in r.lim))).filter(n, {gpu} && {positive})).flatten()"
    )
    sharing = compiled.ruleset.gpu_sharing
    if sharing.schedulers and sharing.annotations:
        # Part of a GPU from a GPU-sharing scheduler asks for its resource's toleration.
        shared = f"[{q(sharing.resource)}]"
        asked += f" + (p.cs.exists(r, 'shared' in r && r.shared) ? {shared} : [])"
    current = (
        "('tolerations' in p.s.spec && type(p.s.spec.tolerations) == list"
        " ? p.s.spec.tolerations : [])"
    )
    adds = []
    earlier: dict[tuple[str, str], list[str]] = {}
    for spec in compiled.settings.gpu_tolerations.tolerations:
        if not spec.resources:
            continue  # asked for by DRA devices alone, which only the webhook's facts show
        wanted = f"asked.exists(n, {name_test('n', spec.resources)})"
        covered = [f"current.exists(t, {_tolerates('t', spec.key, spec.effect)})"]
        # An earlier wanted toleration of the same key and effect, once added, covers it.
        covered += earlier.setdefault((spec.key, spec.effect), [])
        earlier[(spec.key, spec.effect)].append(wanted)
        value = f"{{'key': {q(spec.key)}, 'operator': 'Exists', 'effect': {q(spec.effect)}}}"
        adds.append(f"({wanted} && !({' || '.join(covered)}) ? [{value}] : [])")
    if not adds:
        return "[]"
    added = " + ".join(adds)
    at = "p.s.ptr + '/tolerations'"
    appended = patch_op(at + " + '/-'", "t")
    patches = (
        f"size(current) == 0 && !('tolerations' in p.s.spec) ? [{patch_op(at, 'added')}]"
        f" : added.map(t, {appended})"
    )
    # cel has no let: a one-item list bound by map() stands in for each name.
    return _gpu_pods(
        f"[{asked}].map(asked, [{current}].map(current, [{added}].map(added,\n"
        f"    size(added) == 0 ? [] : {patches})[0])[0])[0]"
    )


def _present(c: str, probe: str) -> str:
    """The container has this probe, and it is not empty (the engine's truthiness)."""
    return f"({q(probe)} in {c} && size({c}.{probe}) > 0)"


def _probes(compiled: CompiledRules) -> str:
    """Model loading takes minutes: raise the probe delays, or add a startupProbe; containers
    with a startupProbe of their own are left alone (`gpu-probe-delays`)."""
    cfg = compiled.settings.gpu_probe_delays
    alone = "r.role in ['main', 'sidecar'] && r.asks && !" + _present("r.c", "startupProbe")
    if cfg.strategy == "startup-probe":
        source = (
            f"({_present('r.c', 'livenessProbe')} ? r.c.livenessProbe"
            f" : {_present('r.c', 'readinessProbe')} ? r.c.readinessProbe : {{}})"
        )
        period = cfg.startup_period_seconds
        base = (
            f"{{'periodSeconds': {period}, "
            f"'failureThreshold': {max(1, -(-cfg.startup_budget_seconds // period))}, "
            "'successThreshold': 1}"
        )
        at = "r.ptr + '/startupProbe'"
        handler = patch_op(at + " + '/' + h", "src[h]")
        per_container = (
            f"[{source}].map(src, [{qlist(PROBE_HANDLERS)}.filter(h, h in src)].map(hs,"
            f" size(hs) == 0 ? [] : [{patch_op(at, base)}] + hs.map(h, {handler}))[0])[0]"
        )
    else:
        parts = []
        for probe, floor in (
            ("readinessProbe", cfg.readiness_min_delay_seconds),
            ("livenessProbe", cfg.liveness_min_delay_seconds),
        ):
            delay = f"r.c.{probe}.initialDelaySeconds"
            enough = (
                f"'initialDelaySeconds' in r.c.{probe} && type({delay}) == int"
                f" && {delay} >= {floor}"
            )
            op = patch_op(f"r.ptr + {q('/' + probe + '/initialDelaySeconds')}", str(floor))
            parts.append(f"({_present('r.c', probe)} && !({enough}) ? [{op}] : [])")
        per_container = " + ".join(parts)
    return _gpu_pods(f"p.cs.map(r, {alone} ? {per_container} : []).flatten()")


@dataclass(frozen=True, slots=True)
class _Mutation:
    rule: str
    on: Callable[[CompiledRules], bool]
    patches: Callable[[CompiledRules], str]
    why: str


_MUTATIONS = (
    _Mutation(
        "gpu-requests-limits",
        lambda c: c.settings.gpu_requests_limits.fix,
        _requests_to_limits,
        "a GPU only in requests is copied to limits",
    ),
    _Mutation(
        "gpu-tolerations",
        lambda c: c.settings.gpu_tolerations.mutate,
        _tolerations,
        "GPU pods get the toleration of their GPU's taint",
    ),
    _Mutation(
        "gpu-probe-delays",
        lambda c: c.settings.gpu_probe_delays.mutate,
        _probes,
        "probe delays long enough for model loading (or a startupProbe)",
    ),
)

MUTATIONS_LEFT_OUT: dict[str, str] = {
    "gpu-shm": (
        "an existing /dev/shm is found by normalising mount paths, which CEL cannot, and a "
        "KServe predictor's serving runtime is a cluster fact"
    ),
    "gpu-priority-class": "needs the class's value and preemptionPolicy, cluster facts",
    "visible-devices": (
        "whether a pod can reach GPU nodes (the nodes' real taints, the node nodeName names) "
        "is a cluster fact"
    ),
}


def _policy(name: str, mutation: _Mutation, rules: CompiledRuleSet) -> dict[str, Any]:
    spec: dict[str, Any] = {
        # As the mutating webhook: a convenience, never a safety boundary; the validating
        # policies and webhook judge what comes out.
        "failurePolicy": "Ignore",
        "matchConstraints": match_constraints(rules.workloads),
    }
    conditions = exempt_conditions(rules)
    if conditions:
        spec["matchConditions"] = conditions
    spec["variables"] = pod_variables(rules)
    spec["mutations"] = [
        {"patchType": "JSONPatch", "jsonPatch": {"expression": mutation.patches(rules.base)}}
    ]
    # Another mutation (ours or another policy's, or a webhook) may add a GPU container.
    spec["reinvocationPolicy"] = "IfNeeded"
    return {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {
            "name": name,
            "labels": dict(LABELS),
            "annotations": {RULES_ANNOTATION: mutation.rule},
        },
        "spec": spec,
    }


def mutating(
    rules: CompiledRuleSet,
) -> tuple[list[dict[str, Any]], list[tuple[str, str]], list[LeftOut]]:
    """(objects, exported mutations with what they do, mutations left out with why)."""
    objects: list[dict[str, Any]] = []
    exported: list[tuple[str, str]] = []
    left: list[LeftOut] = []
    ceiling = rules.base.ceiling
    for mutation in _MUTATIONS:
        if ceiling not in (Mode.ENFORCE, Mode.WARN):
            why: str | None = f"mode {ceiling}: the rule set changes nothing"
        elif not mutation.on(rules.base):
            why = "switched off in the rules"
        else:
            why = skipped(mutation.rule, rules, mode=None)
        if why is not None:
            left.append(LeftOut(mutation.rule, why, "mutation"))
            continue
        name = f"{mutation.rule}.{GROUP_SUFFIX}"
        objects.append(_policy(name, mutation, rules))
        objects.append(
            {
                "apiVersion": API_VERSION,
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": name, "labels": dict(LABELS)},
                "spec": {"policyName": name, "matchResources": namespace_selector(rules)},
            }
        )
        exported.append((mutation.rule, mutation.why))
    left += [LeftOut(r, why, "mutation") for r, why in MUTATIONS_LEFT_OUT.items()]
    return objects, exported, left
