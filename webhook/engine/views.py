"""The typed read-only views the rules read: a pod spec inside an object, and its containers
with their GPU asks already parsed. `podviews` finds the pod specs and builds these."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from webhook.quantity import Amount

__all__ = ["ContainerView", "PodView"]


# Compiled values ("Compiled values", docs/development.md): never edited once built;
# `dataclasses.replace` makes new ones.
@dataclass(slots=True, eq=False, init=False)
class ContainerView:
    """One container (or init container) with its GPU asks already parsed."""

    raw: dict[str, Any]
    slot: tuple[str | int, ...]  # where it sits in the pod spec: ("containers", 0) or ("model",)
    init: bool  # in initContainers, sidecars included
    name: str
    field_path: str  # for messages, e.g. spec.template.spec.containers[0]
    gpu_limits: dict[str, Amount]
    gpu_requests: dict[str, Amount]
    raw_gpu_limits: dict[str, Any]
    raw_gpu_requests: dict[str, Any]
    # Zero is not an ask: `nvidia.com/gpu: 0` is a common way to say "no GPU".
    asks_gpu: bool = False
    # An init container with restartPolicy: Always: it runs beside the regular containers.
    sidecar: bool = False
    # In ephemeralContainers (kubectl debug): no resources, added to a running pod.
    ephemeral: bool = False
    # The key of its ResourceRequirements: "resources", except for container-like objects
    # outside a pod spec (Kubeflow Trainer's spec.trainer.resourcesPerNode).
    resources_key: str = "resources"
    # DRA: (pod claim name, request name or "") of each resources.claims entry, and the GPU
    # DeviceClasses they resolve to once the engine has the facts (`engine.claims`), which
    # then also sets `asks_gpu`.
    claims: tuple[tuple[str, str], ...] = ()
    gpu_classes: tuple[str, ...] = ()
    # DRA: its claims whose DeviceClass the facts do not know, each described for a message
    # ('claim "gpu" (ResourceClaimTemplate t)', 'claim "gpu" (DeviceClass c)'). Unknown is not
    # "no GPU": such a container is never given NVIDIA_VISIBLE_DEVICES=void, and is warned.
    unresolved: tuple[str, ...] = ()
    # The GPU resource a GPU-sharing scheduler gives it part of ("": none; `engine.sharing`,
    # which also sets `asks_gpu`): its NVIDIA_VISIBLE_DEVICES comes from the scheduler's
    # ConfigMap, and it tolerates that resource's GPU taints.
    shared_gpu: str = ""
    # The name its scheduler's webhook gave the pod's ConfigMaps (the pod annotation it writes,
    # e.g. runai/shared-gpu-configmap): only a ConfigMap of that name is the scheduler's.
    shared_config_map: str = ""

    def __init__(
        self,
        raw: dict[str, Any],
        slot: tuple[str | int, ...],
        init: bool,
        name: str,
        field_path: str,
        gpu_limits: dict[str, Amount],
        gpu_requests: dict[str, Amount],
        raw_gpu_limits: dict[str, Any],
        raw_gpu_requests: dict[str, Any],
        asks_gpu: bool = False,
        sidecar: bool = False,
        ephemeral: bool = False,
        resources_key: str = "resources",
        claims: tuple[tuple[str, str], ...] = (),
        gpu_classes: tuple[str, ...] = (),
        unresolved: tuple[str, ...] = (),
        shared_gpu: str = "",
        shared_config_map: str = "",
    ) -> None:
        self.raw = raw
        self.slot = slot
        self.init = init
        self.name = name
        self.field_path = field_path
        self.gpu_limits = gpu_limits
        self.gpu_requests = gpu_requests
        self.raw_gpu_limits = raw_gpu_limits
        self.raw_gpu_requests = raw_gpu_requests
        self.asks_gpu = asks_gpu
        self.sidecar = sidecar
        self.ephemeral = ephemeral
        self.resources_key = resources_key
        self.claims = claims
        self.gpu_classes = gpu_classes
        self.unresolved = unresolved
        self.shared_gpu = shared_gpu
        self.shared_config_map = shared_config_map

    def locate(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The same container inside another copy of the pod spec (a mutation's working copy)."""
        node: Any = spec
        for seg in self.slot:
            node = node[seg]
        container: dict[str, Any] = node
        return container

    @property
    def resources(self) -> dict[str, Any]:
        found = self.raw.get(self.resources_key)
        return found if isinstance(found, dict) else {}

    @property
    def resources_path(self) -> str:
        """Where its resources are, for messages: spec.containers[0].resources."""
        return f"{self.field_path}.{self.resources_key}"

    @property
    def runs_alongside(self) -> bool:
        """Runs beside the pod's main work (regular and sidecar containers), not before it."""
        return not self.init or self.sidecar

    def label(self) -> str:
        if self.ephemeral:
            kind = "ephemeral container"
        elif self.sidecar:
            kind = "sidecar container"
        elif self.init:
            kind = "init container"
        else:
            kind = "container"
        return f'{kind} "{self.name}"'


@dataclass(slots=True, eq=False, init=False)
class PodView:
    """A pod spec somewhere inside an object, with where it is and what owns it."""

    spec: dict[str, Any]
    pointer: str  # JSON pointer of the pod spec inside the object
    field_path: str  # the same as a dotted path for messages
    kind: str  # kind of the enclosing object
    labels: dict[str, Any]
    owner_kinds: tuple[str, ...]
    containers: tuple[ContainerView, ...] = field(default=())
    replicas: int = 1  # pods this template stands for at once (replicas, parallelism)
    # Only the GPU-access rules apply: an ephemeral-container update of a running pod.
    isolation_only: bool = False
    # The containers being judged (their slots); None: all. An ephemeral-container update
    # judges only the containers it adds.
    focus: frozenset[tuple[str | int, ...]] | None = None
    # From the workload table: false, the object is judged but never patched (its pods are,
    # when created); shm false, a controller merges it over a base with its own /dev/shm.
    mutable: bool = True
    shm: bool = True
    # A runtime other objects are merged into: a container asking no GPU here may get one
    # from them (no NVIDIA_VISIBLE_DEVICES=void, no toleration-without-GPU warning).
    runtime: bool = False
    # DRA: (name, resourceClaimTemplateName, resourceClaimName) of each spec.resourceClaims.
    resource_claims: tuple[tuple[str, str, str], ...] = ()
    # The GPUs the pod holds while it runs (`accounting.pod_gpus`), worked out once for the
    # several rules that ask. Not an __init__ field: a `dataclasses.replace` copy (other
    # containers) starts without it.
    gpus_held: dict[str, Amount] | None = field(default=None, init=False, repr=False)
    # Why it looks like a device plugin or node agent (`isolation.node_agent`), asked by every
    # finding's fix: worked out once per pod spec (a 1-tuple once known), since the answer
    # walks every container, volume and label. Not an __init__ field, like gpus_held.
    agent: tuple[str | None] | None = field(default=None, init=False, repr=False)
    # The same for whether it fills every node it can run on (`schedulable.why_not_whole_node`,
    # which walks the cluster's nodes), asked by every host path that reaches GPUs; and for
    # whether any container asks for a GPU (None: not asked yet).
    whole_node: tuple[str | None] | None = field(default=None, init=False, repr=False)
    gpu_asked: bool | None = field(default=None, init=False, repr=False)
    # The pod's (or template's) annotations: GPU-sharing schedulers read their asks there.
    annotations: dict[str, Any] = field(default_factory=dict)
    # Rules (validations and mutations) an exemption relaxes for this pod spec
    # (`webhook.ruleset.relaxing`): a label, a built-in component, a named workload.
    relaxed: frozenset[str] = frozenset()
    # Which of its containers take traffic (gpu-readiness-probe): "" none (a batch or
    # training kind, a worker template), "ports" those that declare ports, "main" its first
    # container too (`ruleset.workloads.PodTemplatePath.serving`).
    serving: str = ""

    def __init__(
        self,
        spec: dict[str, Any],
        pointer: str,
        field_path: str,
        kind: str,
        labels: dict[str, Any],
        owner_kinds: tuple[str, ...],
        containers: tuple[ContainerView, ...] = (),
        replicas: int = 1,
        isolation_only: bool = False,
        focus: frozenset[tuple[str | int, ...]] | None = None,
        mutable: bool = True,
        shm: bool = True,
        runtime: bool = False,
        resource_claims: tuple[tuple[str, str, str], ...] = (),
        annotations: dict[str, Any] | None = None,
        relaxed: frozenset[str] = frozenset(),
        serving: str = "",
    ) -> None:
        self.spec = spec
        self.pointer = pointer
        self.field_path = field_path
        self.kind = kind
        self.labels = labels
        self.owner_kinds = owner_kinds
        self.containers = containers
        self.replicas = replicas
        self.isolation_only = isolation_only
        self.focus = focus
        self.mutable = mutable
        self.shm = shm
        self.runtime = runtime
        self.resource_claims = resource_claims
        self.gpus_held = None
        self.agent = None
        self.whole_node = None
        self.gpu_asked = None
        self.annotations = {} if annotations is None else annotations
        self.relaxed = relaxed
        self.serving = serving

    @property
    def asks_gpu(self) -> bool:
        """Whether any container asks for a GPU: worked out once, since some rules ask once
        per finding and the answer walks every container."""
        known = self.gpu_asked
        if known is None:
            known = self.gpu_asked = any(c.asks_gpu for c in self.containers)
        return known

    @property
    def main_containers(self) -> Iterator[ContainerView]:
        """Containers that run for the pod's whole life: regular ones and sidecars."""
        return (c for c in self.containers if c.runs_alongside and not c.ephemeral)
