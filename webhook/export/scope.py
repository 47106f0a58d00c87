"""What every exported policy shares: which requests it sees, the exempt namespaces, the pod
specs it reads (as CEL variables), and the shape of the export's result.

Every parameter (GPU resource names, `fix`, toleration keys, exempt namespaces, the kinds and
their pod-spec paths) is baked into the CEL. A params object would be one more CRD or
ConfigMap for the apiserver to read on every request and a second place to keep in step with
the rule files; the rule files stay the one source, and exporting again after a change keeps
the policies in step (the output's header says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.decision import Mode
from webhook.engine.workloads import WorkloadTable
from webhook.export.cel import name_test, q, qlist, selector_test
from webhook.export.podspecs import containers, pod_specs
from webhook.export.validations import asks_gpu
from webhook.namepatterns import is_pattern
from webhook.ruleset.models import GpuSharing

__all__ = [
    "API_VERSION",
    "GROUP_SUFFIX",
    "LABELS",
    "RULES_ANNOTATION",
    "SOURCE_ANNOTATION",
    "Export",
    "LeftOut",
    "exempt_conditions",
    "match_constraints",
    "namespace_selector",
    "pod_variables",
    "skipped",
]

API_VERSION = "admissionregistration.k8s.io/v1"
GROUP_SUFFIX = "gpu-admission.io"
LABELS = {"app.kubernetes.io/name": "gpu-admission", "app.kubernetes.io/component": "native"}
RULES_ANNOTATION = f"{GROUP_SUFFIX}/rules"  # the rule ids a policy judges, comma-separated
# The rule settings an object comes from (`rules.<id>.<setting>=<value>`, comma-separated), so
# a reviewer can find each generated object's origin in the rule files.
SOURCE_ANNOTATION = f"{GROUP_SUFFIX}/from"


@dataclass(frozen=True, slots=True)
class LeftOut:
    rule: str
    why: str
    part: str = "validation"  # or "mutation", or "quota" (a budget)


@dataclass(frozen=True, slots=True)
class Export:
    """What the export writes: the objects, what is native, and what is left to the webhook."""

    objects: tuple[dict[str, Any], ...]
    exported: tuple[tuple[str, str, str], ...]  # (rule, "validation", "mutation" or "quota", what)
    left_out: tuple[LeftOut, ...]


def match_constraints(table: WorkloadTable) -> dict[str, Any]:
    """Pods on CREATE (a pod's spec is immutable); every other kind of the workload table on
    CREATE and UPDATE (the CEL then looks only at templates that changed), as the webhook."""
    rules: list[dict[str, Any]] = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    for (group, versions, scope), resources in table.api_resources().items():
        rules.append(
            {
                "apiGroups": [group],
                "apiVersions": list(versions),
                "operations": ["CREATE", "UPDATE"],
                "resources": list(dict.fromkeys(resources)),
                "scope": scope,
            }
        )
    return {"matchPolicy": "Equivalent", "resourceRules": rules}


def exempt_conditions(rules: CompiledRuleSet) -> list[dict[str, str]]:
    """The exempt namespaces, patterns included. A cluster-scoped object is judged as in the
    namespace `default`, as the webhook judges it (it has none of its own)."""
    names = rules.source.exemptions.all_namespaces
    if not names:
        return []
    ns = "(request.namespace == '' ? 'default' : request.namespace)"
    return [{"name": "not-exempt-namespace", "expression": f"!{name_test(ns, names)}"}]


def namespace_selector(rules: CompiledRuleSet) -> dict[str, Any]:
    """The binding's matchResources: exact exempt names never reach the CEL at all."""
    exact = [n for n in rules.source.exemptions.all_namespaces if not is_pattern(n)]
    if not exact:
        return {}
    return {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": exact}
            ]
        }
    }


def skipped(rule: str, rules: CompiledRuleSet, *, mode: Mode | None) -> str | None:
    """Why an exportable rule is not exported for this rule set, if it is not (`mode`: the
    validation's mode; None for a mutation, whose switch the caller has checked)."""
    if mode is Mode.OFF:
        return "its mode is off"
    overridden = [o.name for o in rules.source.overrides if rule in o.rules]
    if overridden:
        return f"overrides change it per namespace ({', '.join(overridden)}): not exported yet"
    return None


def _exempt(rules: CompiledRuleSet) -> tuple[str, str]:
    """CEL for (the whole request is exempt, pod-spec record `s` is exempt).

    By the namespace's labels (`namespaceObject`: the webhook reads them from its cluster
    facts; null for a cluster-scoped object, which matches no selector then); by the pod's
    service account (`namespace/name`, `default` when unset); by the pod's labels, which
    exempt from every exported rule (each is one about the pod's own shape and hygiene, which
    is all a podSelector relaxes: `webhook.ruleset.relaxing.BY_LABEL`).
    """
    ex = rules.source.exemptions
    whole = "false"
    if ex.namespace_selector is not None:
        # namespaceObject is typed (a Namespace): has() on its fields, not `in`.
        labels = "namespaceObject.metadata.labels"
        test = selector_test(labels, ex.namespace_selector)
        bare = str(ex.namespace_selector.matches({})).lower()  # a namespace without labels
        whole = f"(namespaceObject != null && (has({labels}) ? {test} : {bare}))"
    spec = []
    if ex.service_accounts:
        ns = "(request.namespace == '' ? 'default' : request.namespace)"
        account = (
            "('serviceAccountName' in s.spec && s.spec.serviceAccountName != ''"
            " ? s.spec.serviceAccountName : 'default')"
        )
        spec.append(name_test(f"({ns} + '/' + {account})", ex.service_accounts))
    if ex.pod_selector is not None:
        spec.append(selector_test("s.labels", ex.pod_selector))
    return whole, " || ".join(spec) or "false"


def shared_gpu(sharing: GpuSharing, r: str) -> str:
    """CEL: container record `r` of pod-spec record `s` is the one a GPU-sharing scheduler
    gives part of a GPU to (`engine.sharing`): the pod names the scheduler and carries one of
    its annotations; the container is the one the container annotation names, else the first
    regular one."""
    named = f"s.notes[{q(sharing.container_annotation)}]"
    has_named = f"({q(sharing.container_annotation)} in s.notes && type({named}) == string"
    has_named += f" && {named} != '')"
    asks = (
        f"{qlist(sharing.annotations)}.exists(a, a in s.notes"
        " && type(s.notes[a]) == string && s.notes[a] != '')"
    )
    which = (
        f"({has_named} ? ('name' in {r}.c && {r}.c.name == {named})"
        f" : ({r}.role == 'main' && {r}.ptr == s.ptr + '/containers/0'))"
    )
    return (
        f"(!s.lone && 'schedulerName' in s.spec && s.spec.schedulerName in "
        f"{qlist(sharing.schedulers)} && {asks} && {r}.role != 'ephemeral' && {which})"
    )


def pod_variables(rules: CompiledRuleSet) -> list[dict[str, str]]:
    """`variables.pods`: one {'s': pod-spec record, 'cs': its container records} per pod spec
    the engine would look at (see `podspecs` for the records)."""
    compiled, table = rules.base, rules.workloads
    inline = [k for w in table.kinds for k in w.inline]
    sharing = rules.source.gpu_sharing
    with_notes = bool(sharing.schedulers and sharing.annotations)
    per_spec = containers(
        "s",
        inline,
        lambda r: asks_gpu(compiled, r),
        (lambda r: shared_gpu(sharing, r)) if with_notes else None,
    )
    whole, spec_exempt = _exempt(rules)
    with_labels = rules.source.exemptions.pod_selector is not None
    # Conditions that are constant for this rule set are left out, not written as `false`.
    kept = [] if spec_exempt == "false" else [f"!({spec_exempt})"]
    kept.append(
        "(size(variables.specs) == 1"
        " || !variables.specs[1].exists(o, o.ptr == s.ptr && o.spec == s.spec))"
    )
    judged = "variables.specs[0].filter(s, " + " && ".join(kept) + ")"
    if whole == "true":
        judged = "[]"
    elif whole != "false":
        judged = f"{whole} ? [] : {judged}"
    return [
        {
            # The pod specs of the object and, on UPDATE, of the old object: one list each.
            "name": "specs",
            "expression": (
                "([object] + (request.operation == 'UPDATE' && oldObject != null"
                " ? [oldObject] : []))\n.map(root, "
                + pod_specs(table, "root", labels=with_labels, notes=with_notes)
                + ")"
            ),
        },
        {
            # On UPDATE only the pod specs that changed: an old object that breaks a rule can
            # still be scaled or relabelled. Exempt pods and namespaces: none.
            "name": "judged",
            "expression": judged,
        },
        {
            "name": "pods",
            "expression": f"variables.judged.map(s, {{'s': dyn(s), 'cs': dyn({per_spec})}})",
        },
    ]
