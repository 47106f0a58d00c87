"""Which exemption covers a pod spec, and what it relaxes (`webhook.ruleset.relaxing`).

A whole exempt namespace is decided before any pod spec is read (`pipeline._scope`); this
module decides for each pod spec of a judged namespace. What an exemption relaxes follows
from who can claim it:

- a listed service account skips everything (the platform team lists it; every pod of its
  namespace may name it, which `rules check` says);
- a built-in component's own service account, or a DaemonSet the rule set or a built-in
  component names, relaxes the GPU-access rules and the pod's own hygiene. A DaemonSet counts
  for its pod template, and for a pod only when the pod's controller reference names it *and*
  the request comes from the Kubernetes DaemonSet controller: anyone may write an
  ownerReference (and read the DaemonSet's uid), no tenant can be that controller;
- a pod's labels relax only the rules about its own shape and hygiene.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.podviews import PodView
from webhook.engine.subject import Subject
from webhook.ruleset.relaxing import BY_COMPONENT, BY_LABEL

__all__ = ["DAEMONSET_CONTROLLERS", "scoped", "workload_of"]

# Who creates a DaemonSet's pods: kube-controller-manager's DaemonSet controller, under its own
# service account (--use-service-account-credentials, as kubeadm and most distributions run
# it) or the controller manager's own identity.
DAEMONSET_CONTROLLERS = frozenset(
    {"system:serviceaccount:kube-system:daemon-set-controller", "system:kube-controller-manager"}
)


def workload_of(subject: Subject) -> tuple[str, str] | None:
    """(kind, name) of the DaemonSet the subject is, or whose pod it claims to be (its
    controller reference, which only the exemption's check of the requester makes trusted)."""
    if subject.kind == "DaemonSet" and subject.group == "apps":
        return ("DaemonSet", subject.name) if subject.name else None
    if subject.kind != "Pod" or subject.group != "":
        return None
    meta = subject.obj.get("metadata") if isinstance(subject.obj, dict) else None
    refs: Any = meta.get("ownerReferences") if isinstance(meta, dict) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            kind, name = ref.get("kind"), ref.get("name")
            api = ref.get("apiVersion")
            if kind == "DaemonSet" and api == "apps/v1" and isinstance(name, str) and name:
                return ("DaemonSet", name)
            return None
    return None


def _named_daemonset(subject: Subject, rules: CompiledRuleSet) -> bool:
    """Whether the subject is a DaemonSet the exemptions name, or a pod its controller made."""
    names = rules.exempt_daemonsets
    if names is None:
        return False
    if subject.kind == "Pod" and (
        subject.operation != "CREATE" or subject.user not in DAEMONSET_CONTROLLERS
    ):
        return False  # asked first: it is the cheap test, and it settles most pods
    found = workload_of(subject)
    return found is not None and names.matches(f"{subject.namespace}/{found[1]}")


def scoped(view: PodView, subject: Subject, rules: CompiledRuleSet) -> PodView | None:
    """The view as exemptions leave it: None when exempt from everything, else with the rules
    an exemption relaxes in `relaxed`."""
    namespace = subject.namespace
    account = view.spec.get("serviceAccountName") or "default"
    if rules.exempt_accounts is not None and rules.exempt_account(namespace, account):
        return None
    relaxed: frozenset[str] = frozenset()
    if rules.exempt_pods is not None and rules.exempt_pods.matches(view.labels):
        relaxed = BY_LABEL
    own = rules.component_accounts
    if (own is not None and own.matches(f"{namespace}/{account}")) or _named_daemonset(
        subject, rules
    ):
        relaxed = relaxed | BY_COMPONENT
    if relaxed:
        return dataclasses.replace(view, relaxed=view.relaxed | relaxed)
    return view
