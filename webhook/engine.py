"""The rule engine: one subject in, a patch and judged findings out. No I/O, no clock.

The webhook, the manifest audit and the live audit all call `mutate` and `validate` here;
only how they obtain the subject differs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from webhook.checks import active_validations, enabled_mutations
from webhook.checks.facts import pod_gpus, pod_product
from webhook.cluster import ClusterFacts, PodGpus
from webhook.config import RuleSet, matches_any
from webhook.context import Context
from webhook.findings import Finding
from webhook.patch import clone, diff, working_copy
from webhook.podviews import PodView, pod_views

__all__ = [
    "Judged",
    "Mutated",
    "Outcome",
    "Subject",
    "evaluate",
    "mutate",
    "scope",
    "validate",
    "validate_and_hold",
]


@dataclass(frozen=True, slots=True)
class Subject:
    """What is being admitted: the object, its kind, and the request facts rules depend on."""

    obj: Any
    group: str
    kind: str
    namespace: str
    operation: str = "CREATE"
    old_obj: Any = None
    # None when unknown (no cluster facts): selectors on namespace labels then match nothing.
    namespace_labels: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Judged:
    """A finding with the mode its rule runs in: enforce denies, warn and audit only report."""

    finding: Finding
    mode: str


@dataclass(slots=True)
class Outcome:
    """Everything the webhook would decide about one object: the patch, then the verdicts."""

    mutated: Any
    patch: list[dict[str, Any]] = field(default_factory=list)
    judged: list[Judged] = field(default_factory=list)

    @property
    def denials(self) -> list[Finding]:
        return [j.finding for j in self.judged if j.mode == "enforce"]

    @property
    def warnings(self) -> list[Finding]:
        return [j.finding for j in self.judged if j.mode == "warn"]

    @property
    def audits(self) -> list[Finding]:
        return [j.finding for j in self.judged if j.mode == "audit"]

    @property
    def allowed(self) -> bool:
        return not any(j.mode == "enforce" for j in self.judged)


def _exempt_namespace(subject: Subject, rules: RuleSet) -> bool:
    ex = rules.exemptions
    if matches_any(subject.namespace, ex.namespaces):
        return True
    labels = subject.namespace_labels
    return (
        ex.namespace_selector is not None
        and labels is not None
        and (ex.namespace_selector.matches(labels))
    )


def _exempt_pod(view: PodView, namespace: str, rules: RuleSet) -> bool:
    ex = rules.exemptions
    if ex.pod_selector is not None and ex.pod_selector.matches(view.labels):
        return True
    if ex.service_accounts:
        account = view.spec.get("serviceAccountName") or "default"
        return matches_any(f"{namespace}/{account}", ex.service_accounts)
    return False


def scope(subject: Subject, rules: RuleSet) -> tuple[RuleSet, list[PodView]]:
    """The rules in force for the subject's namespace, and the pod specs they apply to.

    Pods: CREATE only (a pod's spec is immutable, and a patch on UPDATE would break an innocent
    label change). Controllers: CREATE, and UPDATE only for templates that changed, so an old
    non-compliant Deployment can still be scaled or relabelled.
    """
    if _exempt_namespace(subject, rules):
        return rules, []
    rules = rules.resolve(subject.namespace, subject.namespace_labels).rules
    if subject.operation not in ("CREATE", "UPDATE"):
        return rules, []
    if subject.operation == "UPDATE" and subject.kind == "Pod":
        return rules, []
    views = pod_views(
        subject.obj, group=subject.group, kind=subject.kind, is_gpu=rules.is_gpu_resource
    )
    if subject.operation == "UPDATE" and views and subject.old_obj is not None:
        old_specs = {v.pointer: v.spec for v in _old_views(subject, rules)}
        views = [v for v in views if old_specs.get(v.pointer) != v.spec]
    return rules, [v for v in views if not _exempt_pod(v, subject.namespace, rules)]


def _old_views(subject: Subject, rules: RuleSet) -> list[PodView]:
    try:
        return pod_views(
            subject.old_obj, group=subject.group, kind=subject.kind, is_gpu=rules.is_gpu_resource
        )
    except ValueError:
        return []  # an unreadable old object: treat every template as changed


@dataclass(slots=True)
class Mutated:
    """The patch, and the ids of the rules that changed something (for audit annotations)."""

    patch: list[dict[str, Any]] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)


def _context(subject: Subject, rules: RuleSet, cluster: ClusterFacts | None) -> Context:
    return Context(rules, subject.namespace, subject.kind, subject.operation, cluster)


def _with_labels(subject: Subject, cluster: ClusterFacts | None) -> Subject:
    """Namespace labels from the cluster facts when the caller did not bring them."""
    if subject.namespace_labels is not None or cluster is None:
        return subject
    labels = cluster.namespace_labels(subject.namespace)
    return subject if labels is None else dataclasses.replace(subject, namespace_labels=labels)


def mutate(subject: Subject, rules: RuleSet, *, cluster: ClusterFacts | None = None) -> Mutated:
    """The JSON patch that makes every GPU pod spec in the subject right for GPU nodes.

    Raises `UnreadableObject` for an object whose fields have impossible types.
    """
    out = Mutated()
    subject = _with_labels(subject, cluster)
    rules, views = scope(subject, rules)
    ctx = _context(subject, rules, cluster)
    enabled = enabled_mutations(rules)
    if not enabled:
        return out
    for view in views:
        if not view.asks_gpu:
            continue
        work = working_copy(view.spec, (c.slot for c in view.containers))
        for mutation in enabled:
            if mutation.apply(work, view, ctx) and mutation.rule not in out.rules:
                out.rules.append(mutation.rule)
        out.patch.extend(diff(view.spec, work, view.pointer))
    return out


def validate(
    subject: Subject, rules: RuleSet, *, cluster: ClusterFacts | None = None
) -> list[Judged]:
    """Every finding of every rule not switched off, with its mode."""
    return _validate(subject, rules, cluster)[0]


def validate_and_hold(
    subject: Subject, rules: RuleSet, *, cluster: ClusterFacts | None = None
) -> tuple[list[Judged], PodGpus | None]:
    """The findings, and what an admitted pod will hold for the driver to reserve until the
    watch sees it (None when nothing is to be held: denied, no GPU, not a pod CREATE).

    Only pod CREATEs hold GPUs; controllers are judged again when their pods are created.
    """
    judged, views = _validate(subject, rules, cluster)
    if (
        subject.kind != "Pod"
        or subject.group != ""
        or subject.operation != "CREATE"
        or not views
        or any(j.mode == "enforce" for j in judged)
    ):
        return judged, None
    gpus = pod_gpus(views[0])
    if not gpus:
        return judged, None
    meta = subject.obj.get("metadata") if isinstance(subject.obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name = str(meta.get("name") or meta.get("generateName") or "")
    hold = PodGpus(subject.namespace, name, "Pending", gpus, product=pod_product(views[0]))
    return judged, hold


def _validate(
    subject: Subject, rules: RuleSet, cluster: ClusterFacts | None
) -> tuple[list[Judged], list[PodView]]:
    judged: list[Judged] = []
    subject = _with_labels(subject, cluster)
    rules, views = scope(subject, rules)
    ctx = _context(subject, rules, cluster)
    active = active_validations(rules, cluster is not None)
    for view in views:
        gpu = view.asks_gpu
        for validation, mode in active:
            if validation.gpu_only and not gpu:
                continue
            judged.extend(
                Judged(f, "warn" if f.advisory and mode == "enforce" else mode)
                for f in validation.check(view, ctx)
            )
    return judged, views


def evaluate(subject: Subject, rules: RuleSet, *, cluster: ClusterFacts | None = None) -> Outcome:
    """What the apiserver would end up with: mutate, apply the patch, validate the result.

    The validating webhook sees the mutated object, so the audit must judge that one too.
    """
    patch = mutate(subject, rules, cluster=cluster).patch
    if patch:
        import jsonpatch  # only the audits need it; the webhook path never applies patches

        # A JSON-only clone is several times cheaper than the deepcopy apply_patch would make.
        mutated = jsonpatch.JsonPatch(patch).apply(clone(subject.obj), in_place=True)
        subject = dataclasses.replace(subject, obj=mutated)
    judged = validate(subject, rules, cluster=cluster)
    return Outcome(mutated=subject.obj, patch=patch, judged=judged)
