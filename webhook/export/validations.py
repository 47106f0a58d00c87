"""The validating rules that CEL can judge exactly as the engine does, one per check.

Each entry gives, for one container record `r` (see `podspecs.containers`), a CEL list of the
messages of the findings the engine's check makes for that container, in its own wording
(`messages.engine_message`). A rule the table does not list is left out of the export, and
`LEFT_OUT` says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from webhook.engine.checks import probes, resources
from webhook.engine.compiled import CompiledRules
from webhook.export.cel import name_test, q, quantity_of, shown
from webhook.export.messages import LIMITED, REQUESTED, engine_message, slot
from webhook.facts.dra import IMPLICIT_PREFIX

__all__ = ["EXPORTED", "LEFT_OUT", "ExportedRule", "asks_gpu", "gpu_name"]


def gpu_name(rules: CompiledRules, var: str) -> str:
    """True when the resource name `var` counts as a GPU under the rule set: a GPU resource,
    or the implicit resource name of a DRA class that is a GPU class by its name
    (`deviceclass.resource.kubernetes.io/gpu.nvidia.com`), as `CompiledRules.is_gpu` says."""
    classes = rules.ruleset.gpu_device_classes
    implicit = [IMPLICIT_PREFIX + c for c in (*classes.names, *classes.drivers)]
    return name_test(var, [*rules.ruleset.gpu_resources, *implicit])


def _positive(value: str) -> str:
    return f"sign({quantity_of(value)}) > 0"


def asks_gpu(rules: CompiledRules, r: str = "r") -> str:
    """The container record asks for a GPU: a GPU amount other than zero (DRA claims are no
    ask here, as in the engine without cluster facts)."""
    lim = f"{r}.lim.exists(n, {gpu_name(rules, 'n')} && {_positive(f'{r}.lim[n]')})"
    req = f"{r}.req.exists(n, {gpu_name(rules, 'n')} && {_positive(f'{r}.req[n]')})"
    return f"({lim} || {req})"


_WHERE = {"label": "r.label", "path": "r.path", "key": "r.key"}
_NAME = slot("name")


def _whole_quantity(rules: CompiledRules) -> str:
    per_section = []
    for section in ("limits", "requests"):
        amounts = f"r.{section[:3]}"
        half = {_NAME: Fraction(1, 2)}
        text = engine_message(
            resources.whole_quantities,
            rules,
            {**_WHERE, "name": "n", "value": f"string({amounts}[n])"},
            limits=half if section == "limits" else None,
            requests=half if section == "requests" else None,
            raw={_NAME: slot("value")},
        )
        amount = quantity_of(f"{amounts}[n]")
        bad = f"(sign({amount}) < 0 || !{amount}.isInteger())"
        per_section.append(
            f"{amounts}.map(n, n).filter(n, {gpu_name(rules, 'n')}).sort()"
            f".filter(n, {bad}).map(n, {text})"
        )
    return " + ".join(per_section)


def _requests_limits(rules: CompiledRules) -> str:
    where = {**_WHERE, "name": "n"}
    requested, limited = shown("r.req[n]"), shown("r.lim[n]")
    no_limit = engine_message(
        resources.requests_equal_limits,
        rules,
        where,
        requests={_NAME: REQUESTED},
        literals={str(REQUESTED): requested},
    )
    differ = engine_message(
        resources.requests_equal_limits,
        rules,
        where,
        requests={_NAME: REQUESTED},
        limits={_NAME: LIMITED},
        literals={str(REQUESTED): requested, str(LIMITED): limited},
    )
    # The webhook copies a GPU only in requests into limits, except where it patches nothing
    # (TrainJob, NIMService): there the pods get the limit when they are created.
    skip = "!r.mutable" if rules.settings.gpu_requests_limits.fix else "false"
    unequal = f"{quantity_of('r.lim[n]')}.compareTo({quantity_of('r.req[n]')}) != 0"
    return (
        f"r.req.map(n, n).filter(n, {gpu_name(rules, 'n')}).sort()"
        f".filter(n, n in r.lim ? {unequal} : !({skip}))"
        f".map(n, n in r.lim ? {differ} : {no_limit})"
    )


def _mig_mixed(rules: CompiledRules) -> str:
    full, mig = resources.FULL_GPU, resources.MIG_PREFIX
    marker = mig + "made-up-profile"
    text = engine_message(
        resources.mig_not_mixed,
        rules,
        _WHERE,
        limits={full: 1, marker: 1},
        literals={marker: "migs.join(', ')"},
    )
    # The value the engine reads for a name: limits win over requests.
    names = "(r.lim.map(n, n) + r.req.map(n, n).filter(n, !(n in r.lim)))"
    asked = f"{_positive('(n in r.lim ? r.lim[n] : r.req[n])')}"
    gpu = gpu_name(rules, "n")
    migs = f"{names}.filter(n, {gpu} && n.startsWith({q(mig)}) && {asked}).sort()"
    has_full = f"{names}.exists(n, n == {q(full)} && {gpu} && {asked})"
    return f"({has_full} ? [{migs}].filter(migs, size(migs) > 0).map(migs, {text}) : [])"


def _memory_limit(rules: CompiledRules) -> str:
    text = engine_message(resources.memory_limit, rules, _WHERE, limits={"nvidia.com/gpu": 1})
    cond = "r.role in ['main', 'sidecar'] && r.asks && !('memory' in r.lim)"
    return f"({cond} ? [{text}] : [])"


def _init_container(rules: CompiledRules) -> str:
    text = engine_message(
        resources.init_container_gpu,
        rules,
        _WHERE,
        limits={"nvidia.com/gpu": 1},
        init=True,
    )
    return f"(r.role == 'init' && r.asks ? [{text}] : [])"


def _readiness_probe(rules: CompiledRules) -> str:
    text = engine_message(probes.readiness_probe, rules, _WHERE, limits={"nvidia.com/gpu": 1})
    # `p` is the pod the container record belongs to (see `validating._findings`); its
    # `serving` says which containers take traffic (`podspecs`, `probes.serves`).
    serving = (
        "p.s.serving != ''"
        " && !('restartPolicy' in p.s.spec && p.s.spec.restartPolicy in ['Never', 'OnFailure'])"
    )
    ports = "'ports' in r.c && type(r.c.ports) == list && size(r.c.ports) > 0"
    serves = f"({ports} || (p.s.serving == 'main' && r.ptr == p.s.ptr + '/containers/0'))"
    probe = "'readinessProbe' in r.c && size(r.c.readinessProbe) > 0"
    cond = f"{serving} && r.role in ['main', 'sidecar'] && r.asks && !({probe}) && {serves}"
    return f"({cond} ? [{text}] : [])"


@dataclass(frozen=True, slots=True)
class ExportedRule:
    rule: str
    # True: judged only in pod specs that ask for a GPU (the engine's `gpu_only`).
    gpu_only: bool
    messages: Callable[[CompiledRules], str]  # CEL list of messages for container record `r`
    why: str  # one line for the output's header: what the policy checks


EXPORTED: tuple[ExportedRule, ...] = (
    ExportedRule(
        "gpu-requests-limits",
        True,
        _requests_limits,
        "GPU requests equal to limits (a GPU only in requests: see the mutating policy)",
    ),
    ExportedRule(
        "gpu-whole-quantity", False, _whole_quantity, "whole GPU quantities, never negative"
    ),
    ExportedRule("gpu-mig-mixed", True, _mig_mixed, "MIG profiles and whole GPUs not mixed"),
    ExportedRule("gpu-memory-limit", True, _memory_limit, "a memory limit on every GPU container"),
    ExportedRule("gpu-init-container", True, _init_container, "no GPU in init containers"),
    ExportedRule(
        "gpu-readiness-probe",
        True,
        _readiness_probe,
        "a readinessProbe on GPU containers that serve (ports, or a serving kind's model server)",
    ),
)

_FACTS = "needs cluster facts, which a policy cannot read"
LEFT_OUT: dict[str, str] = {
    "gpu-quota": f"{_FACTS} (namespace budgets, usage, ResourceQuota)",
    "gpu-priority-class": f"{_FACTS} (whether the class exists, its value)",
    "gpu-schedulable": f"{_FACTS} (node shapes, labels, provisioning)",
    "gpu-queue": f"{_FACTS} (Kueue's and KAI's queues, their quotas and flavors)",
    "gpu-spend": (
        "a workload's ask is summed over its templates and replicas (and a share of a GPU "
        "read from annotations), and its job fields (ttlSecondsAfterFinished, "
        "activeDeadlineSeconds, which it also sets) are at a path each kind puts elsewhere"
    ),
    "gpu-shm": (
        "its finding (a KServe predictor whose serving runtime may bring /dev/shm) depends on "
        "the runtime, a cluster fact"
    ),
    "visible-devices": (
        "whether a pod can reach GPU nodes (the nodes' real taints, the node nodeName names) "
        "and what an envFrom ConfigMap holds are cluster facts; and its fix names the "
        "exemption for a node agent, found by normalising hostPath paths, which CEL cannot"
    ),
    "privileged-gpu": (
        "whether a pod can reach GPU nodes (the nodes' real taints, the node nodeName names) is "
        "a cluster fact; and its fix names the exemption for a node agent, found by "
        "normalising hostPath paths, which CEL cannot"
    ),
    "host-gpu-devices": (
        "hostPath paths are normalised ('//', '.', '..') before matching; CEL has no "
        "faithful path normalisation"
    ),
    "gpu-toleration-without-gpu": (
        "a DRA claim that may hand out GPUs keeps a pod out of it, and which class a claim "
        "draws from is a cluster fact"
    ),
}
