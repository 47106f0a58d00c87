"""The Mutating/ValidatingWebhookConfigurations as YAML: how the apiserver calls gpu-admission."""

# `gpu-admission rules webhooks --rules manifests/base/rules` prints both configurations. Their
# rules come from the workload table, their namespaceSelector from the exempt namespaces, their
# matchConditions from routingcel.py; manifests/base/webhooks.yaml is this output for
# manifests/base/rules, the rules the ConfigMap deploys (a test keeps them equal).

from __future__ import annotations

import json

from webhook.celtext import qlist
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.workloads import WorkloadTable
from webhook.namepatterns import is_pattern
from webhook.rulecli.routingcel import gpu_workload_condition, sharing_config_map_condition
from webhook.ruleset.models import RuleSet

__all__ = ["render_webhooks"]

NAMESPACE = "gpu-admission"
# Never sent, whatever the rule set says: the control plane must not wait on a webhook, and
# the webhook must be able to restart while it is down.
ALWAYS_SKIPPED = ("kube-system", NAMESPACE)


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


def _namespace_selector(rules: CompiledRuleSet) -> str:
    """Both webhooks skip the same namespaces: the exempt ones the rules name."""
    names = "".join(f"\n            - {n}" for n in _skipped_namespaces(rules.source))
    return f"""\
    namespaceSelector:
      matchExpressions:
        - key: kubernetes.io/metadata.name
          operator: NotIn
          values:{names}"""


def _routing(rules: CompiledRuleSet) -> str:
    condition = "\n".join(
        ("          " + line).rstrip() for line in gpu_workload_condition(rules).splitlines()
    )
    return f"""\
{_namespace_selector(rules)}
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


def _config_map_entry(rules: CompiledRuleSet) -> str:
    """The validating webhook on ConfigMap writes: only the sharing scheduler's binder may put
    a device list in a pod's ConfigMap."""
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
{_namespace_selector(rules)}
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
