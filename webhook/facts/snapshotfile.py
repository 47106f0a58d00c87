"""The static cluster snapshot: a cluster's GPU facts as one YAML file, and its reader.

Used by the offline audit, the tests and `make run`; the format is documented in
`examples/cluster-snapshot.yaml`. ConfigMaps and Secrets are optional sections: without one,
that kind is unknown (`None` in the facts), which the isolation rules read differently from
"known, and no such key". So are the autoscaler sections (`nodePools`, `machineSets`,
`machineDeployments`, `machinePools`, objects as `kubectl get -o yaml` prints them): with none
of them the cluster's provisioning is unknown; with any of them, what they list is all it can
create.
DRA objects (`deviceClasses`, `resourceClaimTemplates`, `resourceClaims`, `resourceSlices`,
whole, as the API returns them) are optional per kind too: a section left out is unknown, `[]`
known and empty.
KServe's runtimes (`servingRuntimes`, each with its metadata.namespace, and
`clusterServingRuntimes`, whole, as the API returns them) are read by
`webhook.facts.servingruntimes`: with neither section they are unknown (an InferenceService
predictor then gets no /dev/shm, and a warning); with either, the other is known and empty.
Queues (`localQueues`, `clusterQueues`, `resourceFlavors`: Kueue's; `queues`: KAI's and
Run:ai's) are the same: with none of the four sections they are unknown; with any, the others
are known and empty.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from webhook.facts import dra, queues
from webhook.facts.census import Census
from webhook.facts.model import (
    GPU_PRODUCT_LABEL,
    Node,
    PodGpus,
    PriorityClass,
    Quota,
)
from webhook.facts.provisioning import provisioning
from webhook.facts.queues import QueueStore
from webhook.facts.quotascopes import ScopeTerm
from webhook.facts.quotascopes import problems as scope_problems
from webhook.facts.servingruntimes import RuntimeStore
from webhook.facts.static import StaticSnapshot
from webhook.facts.webhookconfigs import WebhookTimeouts
from webhook.modelerrors import Invalid, describe
from webhook.quantity import Amount, QuantityError, parse_quantity
from webhook.yamlinput import YamlFileError, read_document

__all__ = ["SnapshotError", "SnapshotFile", "StaticSnapshot", "load_snapshot", "snapshot_from_doc"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)


class _NamespaceDoc(_Model):
    labels: dict[str, str] = Field(default_factory=dict)


class _TaintDoc(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


# More nodes than any cluster runs (Kubernetes is tested to 5,000; the largest run ~65k), in
# all: `count` makes one entry stand for many, so a few bytes could ask for millions of nodes.
MAX_NODES = 100_000


class _NodeDoc(_Model):
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    allocatable: dict[str, int | str] = Field(default_factory=dict)
    count: int = Field(default=1, ge=1, le=MAX_NODES)  # N identical nodes: name-0 .. name-(N-1)
    unschedulable: bool = False
    taints: list[_TaintDoc] = Field(default_factory=list)


_ScopeName = Literal[
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
    "VolumeAttributesClass",  # a storage scope: counts no pod
]


class _ScopeExpressionDoc(_Model):
    scope_name: _ScopeName
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class _ScopeSelectorDoc(_Model):
    match_expressions: list[_ScopeExpressionDoc] = Field(default_factory=list)


class _QuotaDoc(_Model):
    namespace: str
    name: str
    hard: dict[str, int | str] = Field(default_factory=dict)
    used: dict[str, int | str] = Field(default_factory=dict)
    # Which pods the quota counts, as the ResourceQuota's spec says it; none: every pod.
    scopes: list[_ScopeName] = Field(default_factory=list)
    scope_selector: _ScopeSelectorDoc | None = None

    def terms(self) -> tuple[ScopeTerm, ...]:
        expressions = self.scope_selector.match_expressions if self.scope_selector else []
        return (
            *(ScopeTerm(s) for s in self.scopes),
            *(ScopeTerm(e.scope_name, e.operator, tuple(e.values)) for e in expressions),
        )

    @model_validator(mode="after")
    def _scopes_the_apiserver_stores(self) -> _QuotaDoc:
        found = scope_problems(self.terms())
        if found:
            raise Invalid(
                "; ".join(found),
                "write scopes as the ResourceQuota has them (kubectl get resourcequota -o yaml)",
            )
        return self


class _PriorityClassDoc(_Model):
    name: str
    value: int
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    global_default: bool = False


class _PodDoc(_Model):
    namespace: str
    name: str
    phase: str = "Running"
    # A pod of no GPU counts for nothing in usage: listed only to say who runs where.
    gpus: dict[str, int | str] = Field(default_factory=dict)
    node: str = ""
    product: str = ""
    priority_class: str = ""
    # spec.serviceAccountName: `rules check` compares the built-in exemptions with it.
    service_account: str = ""


class _ConfigMapDoc(_Model):
    namespace: str
    name: str
    data: dict[str, str] = Field(default_factory=dict)


class _SecretDoc(_Model):
    namespace: str
    name: str
    data: dict[str, str] = Field(default_factory=dict)  # base64, as the API returns it
    string_data: dict[str, str] = Field(default_factory=dict)  # plain; wins over `data`


class SnapshotFile(_Model):
    """`gpu-admission.io/v1` ClusterSnapshot: a cluster's GPU facts as one YAML file."""

    api_version: Literal["gpu-admission.io/v1"]
    kind: Literal["ClusterSnapshot"]
    namespaces: dict[str, _NamespaceDoc] = Field(default_factory=dict)
    nodes: list[_NodeDoc] = Field(default_factory=list)
    resource_quotas: list[_QuotaDoc] = Field(default_factory=list)
    priority_classes: list[_PriorityClassDoc] = Field(default_factory=list)
    pods: list[_PodDoc] = Field(default_factory=list)
    # None (the section left out) = this kind is not known, unlike an empty list.
    config_maps: list[_ConfigMapDoc] | None = None
    secrets: list[_SecretDoc] | None = None
    # Autoscaler objects whole, as the API returns them (karpenter.sh/v1 NodePool,
    # cluster.x-k8s.io MachineSet / MachineDeployment / MachinePool); read by
    # `webhook.facts.provisioning`.
    node_pools: list[dict[str, Any]] | None = None
    machine_sets: list[dict[str, Any]] | None = None
    machine_deployments: list[dict[str, Any]] | None = None
    machine_pools: list[dict[str, Any]] | None = None
    # DRA objects whole (resource.k8s.io/v1 DeviceClass, ResourceClaimTemplate, ResourceClaim;
    # v1beta1 request shapes are read too); read by `webhook.facts.dra`.
    device_classes: list[dict[str, Any]] | None = None
    resource_claim_templates: list[dict[str, Any]] | None = None
    resource_claims: list[dict[str, Any]] | None = None
    # The devices DRA drivers publish on each node (whole ResourceSlices).
    resource_slices: list[dict[str, Any]] | None = None
    # KServe serving runtimes whole (serving.kserve.io/v1alpha1 ServingRuntime, each with its
    # metadata.namespace, and ClusterServingRuntime); read by `webhook.facts.servingruntimes`.
    serving_runtimes: list[dict[str, Any]] | None = None
    cluster_serving_runtimes: list[dict[str, Any]] | None = None
    # admissionregistration.k8s.io/v1 ValidatingWebhookConfigurations whole: how long the
    # admission chain may keep a pod create waiting (`webhook.facts.webhookconfigs`).
    validating_webhook_configurations: list[dict[str, Any]] | None = None
    # Kueue's LocalQueues (each with its metadata.namespace), ClusterQueues and
    # ResourceFlavors, and KAI/Run:ai Queues, whole; read by `webhook.facts.queues`.
    local_queues: list[dict[str, Any]] | None = None
    cluster_queues: list[dict[str, Any]] | None = None
    resource_flavors: list[dict[str, Any]] | None = None
    queues: list[dict[str, Any]] | None = None


class SnapshotError(ValueError):
    """The snapshot file cannot be read; the message names the file and the field."""


def _amounts(values: Mapping[str, int | str], where: str) -> dict[str, Amount]:
    out = {}
    for name, value in values.items():
        try:
            out[name] = parse_quantity(value)
        except QuantityError as exc:
            raise SnapshotError(f"{where}.{name}: {exc}") from None
    return out


# Taint effects that keep a pod off a node; PreferNoSchedule only steers the scheduler.
_KEEPING_OFF = frozenset({"NoSchedule", "NoExecute"})


def _secret_data(doc: _SecretDoc, where: str) -> dict[str, str]:
    """A Secret's values as the kubelet hands them to `envFrom`: `data` decoded, then
    `stringData` on top (the API server merges it the same way)."""
    out: dict[str, str] = {}
    for key, value in doc.data.items():
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise SnapshotError(f"{where}.data.{key}: not base64") from None
        out[key] = raw.decode("utf-8", errors="replace")
    out.update(doc.string_data)
    return out


def snapshot_from_doc(doc: SnapshotFile) -> StaticSnapshot:
    total = sum(n.count for n in doc.nodes)
    if total > MAX_NODES:
        raise SnapshotError(
            f"nodes: {total} nodes in all (counts included); at most {MAX_NODES}. Fix: list "
            "each node shape once, with the count of its nodes up to that"
        )
    nodes = []
    for i, n in enumerate(doc.nodes):
        gpus = _amounts(n.allocatable, f"nodes[{i}].allocatable")
        names = [n.name] if n.count == 1 else [f"{n.name}-{k}" for k in range(n.count)]
        taints = tuple((t.key, t.value, t.effect) for t in n.taints if t.effect in _KEEPING_OFF)
        nodes += [Node(name, n.labels, gpus, n.unschedulable, taints) for name in names]
    quotas = [
        Quota(
            q.namespace,
            q.name,
            _amounts(q.hard, f"resourceQuotas[{i}].hard"),
            _amounts(q.used, f"resourceQuotas[{i}].used"),
            q.terms(),
        )
        for i, q in enumerate(doc.resource_quotas)
    ]
    classes = [
        PriorityClass(p.name, p.value, p.preemption_policy, p.global_default)
        for p in doc.priority_classes
    ]
    node_product = {n.name: n.labels.get(GPU_PRODUCT_LABEL, "") for n in nodes}
    pods = [
        PodGpus(
            p.namespace,
            p.name,
            p.phase,
            _amounts(p.gpus, f"pods[{i}].gpus"),
            p.node,
            p.product or node_product.get(p.node, ""),
            p.priority_class,
        )
        for i, p in enumerate(doc.pods)
    ]
    config_maps = None
    if doc.config_maps is not None:
        config_maps = [(c.namespace, c.name, c.data) for c in doc.config_maps]
    secrets = None
    if doc.secrets is not None:
        secrets = [
            (s.namespace, s.name, _secret_data(s, f"secrets[{i}]"))
            for i, s in enumerate(doc.secrets)
        ]
    return StaticSnapshot(
        namespaces={k: v.labels for k, v in doc.namespaces.items()},
        nodes=nodes,
        quotas=quotas,
        priority_classes=classes,
        pods=pods,
        config_maps=config_maps,
        secrets=secrets,
        dra_cache=_dra(doc),
        serving_runtimes=_serving_runtimes(doc),
        webhooks=_webhooks(doc),
        provisionable=provisioning(
            doc.node_pools, doc.machine_sets, doc.machine_deployments, doc.machine_pools
        ),
        census=_census(doc),
        queues=_queues(doc),
    )


def _queues(doc: SnapshotFile) -> QueueStore | None:
    """Kueue's and KAI's queues; None: no section given. Given Kueue sections, a left-out
    Kueue section is known and empty; so is KAI's when a Kueue one is given, and back."""
    sections = {
        queues.LOCAL: (doc.local_queues, "localQueues"),
        queues.CLUSTER: (doc.cluster_queues, "clusterQueues"),
        queues.FLAVOR: (doc.resource_flavors, "resourceFlavors"),
        queues.KAI: (doc.queues, "queues"),
    }
    if all(objects is None for objects, _ in sections.values()):
        return None
    for kind, (objects, where) in sections.items():
        for i, obj in enumerate(objects or ()):
            meta = obj.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
                raise SnapshotError(f"{where}[{i}].metadata.name: required")
            if kind == queues.LOCAL and not isinstance(meta.get("namespace"), str):
                raise SnapshotError(f"{where}[{i}].metadata.namespace: required")
    return QueueStore.from_objects({kind: objects or [] for kind, (objects, _) in sections.items()})


def _census(doc: SnapshotFile) -> Census | None:
    """Who runs where: known only when the pods say which service account they run as."""
    if not any(p.service_account for p in doc.pods):
        return None
    pods = ((p.namespace, p.service_account, p.name) for p in doc.pods)
    return Census.of(doc.namespaces, pods)


def _serving_runtimes(doc: SnapshotFile) -> RuntimeStore | None:
    """KServe's runtimes, both kinds known once either section is given; None: neither."""
    if doc.serving_runtimes is None and doc.cluster_serving_runtimes is None:
        return None
    for i, obj in enumerate(doc.serving_runtimes or ()):
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("namespace"), str):
            raise SnapshotError(f"servingRuntimes[{i}].metadata.namespace: a name is required")
    return RuntimeStore.from_objects(doc.serving_runtimes or (), doc.cluster_serving_runtimes or ())


def _webhooks(doc: SnapshotFile) -> WebhookTimeouts | None:
    """The validating webhook configurations, when the section is given; None: unknown."""
    objects = doc.validating_webhook_configurations
    if objects is None:
        return None
    for i, obj in enumerate(objects):
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            raise SnapshotError(f"validatingWebhookConfigurations[{i}].metadata.name: required")
    return WebhookTimeouts.from_objects(objects)


def _dra(doc: SnapshotFile) -> dra.DraCache | None:
    """The DRA sections given, each as the live cache would list it; None when none is."""
    sections = {
        "deviceclasses": (doc.device_classes, "deviceClasses"),
        "resourceclaimtemplates": (doc.resource_claim_templates, "resourceClaimTemplates"),
        "resourceclaims": (doc.resource_claims, "resourceClaims"),
        "resourceslices": (doc.resource_slices, "resourceSlices"),
    }
    if all(objects is None for objects, _ in sections.values()):
        return None
    cache = dra.DraCache()
    for kind, (objects, where) in sections.items():
        if objects is None:
            continue
        items = []
        for i, obj in enumerate(objects):
            namespace, name, value = dra.reduce(kind, obj)
            cluster_scoped = kind in ("deviceclasses", "resourceslices")
            if not name or (not cluster_scoped and not namespace):
                what = "metadata.name" if not name else "metadata.namespace"
                raise SnapshotError(f"{where}[{i}].{what}: required")
            items.append((namespace, name, value))
        cache.replace(kind, items)
    return cache


def load_snapshot(path: Path | str) -> StaticSnapshot:
    path = Path(path)
    try:
        return snapshot_from_doc(SnapshotFile.model_validate(read_document(path)))
    except YamlFileError as exc:
        raise SnapshotError(str(exc)) from None
    except ValidationError as exc:
        problems = "; ".join(describe(e, SnapshotFile) for e in exc.errors(include_url=False))
        raise SnapshotError(f"{path}: {problems}") from None
    except SnapshotError as exc:
        raise SnapshotError(f"{path}: {exc}") from None
