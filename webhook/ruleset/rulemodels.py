"""Each rule's settings: one model per rule id, and `RuleSettings`, a rule file's `rules:`.

The rest of a rule set (overrides, exemptions, the cluster and sharing settings) is in
`models.py`, which re-exports these.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    field_validator,
    model_validator,
)

from webhook.modelerrors import Invalid
from webhook.quantity import Amount, QuantityError, parse_quantity
from webhook.ruleset.base import StrictModel
from webhook.selectors import LabelSelector


# How a rule file spells a mode; the engine works with `engine.decision.Mode`.
def _yaml_mode(value: Any) -> Any:
    """YAML 1.1 reads an unquoted `off` (and `no`) as false: that is the mode `off`. An unquoted
    `on`/`yes`/`true` is no mode at all, so say what happened instead of listing the modes."""
    if value is False:
        return "off"
    if value is True:
        raise Invalid(
            "YAML read this value as true (on, yes and true all are); a mode is one of "
            "enforce, warn, audit, off",
            'write the mode in quotes, e.g. mode: "enforce"',
        )
    return value


ModeName = Annotated[Literal["enforce", "warn", "audit", "off"], BeforeValidator(_yaml_mode)]


class RuleModel(StrictModel):
    """Every rule's settings: strict, frozen, camelCase (`webhook.ruleset.base`)."""


def _quantity(value: str) -> str:
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise Invalid(str(exc), "write a Kubernetes quantity, e.g. 16Gi or 512Mi") from None
    return value


class ValidationRule(RuleModel):
    mode: ModeName = "enforce"


class WarnRule(RuleModel):
    mode: ModeName = "warn"


class RequestsLimitsRule(RuleModel):
    """GPU requests must equal limits; the apiserver refuses anything else."""

    mode: ModeName = "enforce"
    # Copy a GPU that is only in requests into limits (the usual slip) instead of denying.
    fix: bool = True


class TolerationSpec(RuleModel):
    """The taint toleration that pods asking for any of `resources` get, or (DRA) a device of
    a GPU DeviceClass named in `deviceClasses`, whose CEL selectors require one of `drivers`,
    or whose `extendedResourceName` is one of `resources`."""

    resources: list[str] = Field(default_factory=list)
    device_classes: list[str] = Field(default_factory=list)
    drivers: list[str] = Field(default_factory=list)
    key: str = Field(min_length=1, examples=["nvidia.com/gpu"])
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"

    @model_validator(mode="after")
    def _asked_by_something(self) -> TolerationSpec:
        if not (self.resources or self.device_classes or self.drivers):
            raise Invalid(
                "a toleration needs resources, deviceClasses or drivers",
                "add what it is for, e.g. resources: [nvidia.com/*] (or deviceClasses, drivers)",
            )
        return self


class TolerationsRule(RuleModel):
    mutate: bool = True
    tolerations: list[TolerationSpec] = Field(
        default_factory=lambda: [
            TolerationSpec.model_validate(
                {
                    "resources": ["nvidia.com/*"],
                    "deviceClasses": ["*.nvidia.com"],
                    "drivers": ["gpu.nvidia.com"],
                    "key": "nvidia.com/gpu",
                }
            ),
            TolerationSpec.model_validate(
                {
                    "resources": ["amd.com/gpu"],
                    "deviceClasses": ["*.amd.com"],
                    "drivers": ["gpu.amd.com"],
                    "key": "amd.com/gpu",
                }
            ),
        ]
    )


class ShmRule(RuleModel):
    """Size of the memory-backed /dev/shm; NCCL and PyTorch data loaders need far over 64Mi.

    `memoryFraction` of the container's memory limit, within [`minSize`, `maxSize`]; the floor
    never lifts it past half the limit (a 512Mi limit gets 256Mi), since /dev/shm is charged
    to the container's memory. `defaultSize` when it sets no memory limit.
    """

    mutate: bool = True
    # The finding when none is added because a KServe predictor's serving runtime (which
    # may bring its own) cannot be told.
    mode: ModeName = "warn"
    volume_name: str = Field(default="dshm", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    memory_fraction: float = Field(default=0.5, gt=0, le=1)
    min_size: str = "1Gi"
    max_size: str = "16Gi"
    # Used when the container sets no memory limit, so there is nothing to take a fraction of.
    default_size: str = "8Gi"

    _check_sizes = field_validator("min_size", "max_size", "default_size")(_quantity)

    def sizes(self) -> tuple[Amount, int, int, int]:
        """(fraction, min, max, default bytes); the compiled rules keep the result."""
        return (
            Fraction(str(self.memory_fraction)),
            int(parse_quantity(self.min_size)),
            int(parse_quantity(self.max_size)),
            int(parse_quantity(self.default_size)),
        )

    @model_validator(mode="after")
    def _min_below_max(self) -> ShmRule:
        if parse_quantity(self.min_size) > parse_quantity(self.max_size):
            raise Invalid(
                f"minSize {self.min_size} is larger than maxSize {self.max_size}",
                "lower minSize or raise maxSize",
                ("minSize",),
            )
        return self


class ProbesRule(RuleModel):
    """Model loading takes minutes; probes tuned for a web app kill GPU servers while loading."""

    mutate: bool = True
    # raise-delays: lift initialDelaySeconds; startup-probe: add a startupProbe instead.
    strategy: Literal["raise-delays", "startup-probe"] = "raise-delays"
    readiness_min_delay_seconds: int = Field(default=60, ge=0)
    liveness_min_delay_seconds: int = Field(default=180, ge=0)
    # startup-probe strategy: how long the container may take to start before it is killed.
    startup_budget_seconds: int = Field(default=600, ge=10)
    startup_period_seconds: int = Field(default=10, ge=1)


WhenUnknown = Literal["allow", "deny"]


class VisibleDevicesRule(RuleModel):
    """NVIDIA_VISIBLE_DEVICES: the way into every GPU of a node that needs no privilege."""

    mode: ModeName = "enforce"
    allowed_values: list[str] = Field(default_factory=lambda: ["void", "none", ""])
    # Set NVIDIA_VISIBLE_DEVICES=void in containers that ask for no GPU, in pods that can run
    # on GPU nodes, when the author left it unset (their image may say "all").
    mutate: bool = True
    # An envFrom ConfigMap/Secret whose keys the webhook does not know may set the variable:
    # deny, or allow with a warning.
    when_unknown: WhenUnknown = "deny"


class PrivilegedRule(RuleModel):
    """Privileged containers see every device node of their node: judged wherever the pod can
    reach a GPU node."""

    mode: ModeName = "enforce"
    # Cluster facts older than cluster.maxStalenessSeconds (or not yet read) cannot show whether
    # some GPU node carries no GPU taint, so whether a privileged pod that neither asks for a GPU
    # nor tolerates a GPU taint can land on one: allow with a warning, or deny.
    when_unknown: WhenUnknown = "allow"


class HostDevicesRule(RuleModel):
    """Host paths that reach GPUs without an allocation: the built-in table (device nodes, the
    host's root, the GPUs' sysfs, runtime sockets) always applies."""

    mode: ModeName = "enforce"
    # More host paths to count as GPU access (shell patterns; a directory above one counts).
    paths: list[str] = Field(default_factory=list, examples=[["/opt/vendor/dev/*"]])


class QuotaBudget(RuleModel):
    """GPUs a set of namespaces may hold at once, per resource and optionally per product."""

    name: str = Field(min_length=1, examples=["ml-team"])
    namespaces: list[str] = Field(default_factory=list, examples=[["ml-team"]])
    namespace_selector: LabelSelector | None = None
    # resource name -> GPUs the namespace may hold in non-terminated pods. At least 1: a
    # budget of 0 or less would deny every GPU pod with a quota message (keep GPUs out of a
    # namespace with a ResourceQuota of 0, or by leaving it without a budget and
    # requireQuota: true).
    limits: dict[str, PositiveInt] = Field(default_factory=dict, examples=[{"nvidia.com/gpu": 16}])
    # GPU product (nvidia.com/gpu.product value) -> resource -> GPUs
    products: dict[str, dict[str, PositiveInt]] = Field(
        default_factory=dict, examples=[{"NVIDIA-H100-80GB-HBM3": {"nvidia.com/gpu": 8}}]
    )

    @model_validator(mode="after")
    def _selects_something(self) -> QuotaBudget:
        if not self.namespaces and self.namespace_selector is None:
            raise Invalid(
                "a budget needs namespaces or a namespaceSelector",
                "add namespaces: [ml-team] or namespaceSelector: {matchLabels: {team: ml}}",
            )
        return self


class QuotaRule(RuleModel):
    """Namespace GPU budgets, and an early, clear word on what native ResourceQuota will refuse."""

    mode: ModeName = "enforce"
    budgets: list[QuotaBudget] = Field(default_factory=list)
    native_quota: bool = True
    # Deny GPU pods in namespaces with neither a budget here nor a GPU ResourceQuota.
    require_quota: bool = False
    # No cluster facts, or facts older than cluster.maxStalenessSeconds: allow with a warning,
    # or deny.
    when_unknown: WhenUnknown = "allow"


class PriorityRule(RuleModel):
    """GPU pods run at a priority the platform chose, never a system one."""

    mode: ModeName = "enforce"
    mutate: bool = True
    # Injected into GPU pods that name no class ("" = no injection), with its priority value.
    default_class: str = ""
    # Classes GPU pods may name; empty = any class that exists (never system-* in user namespaces).
    allowed_classes: list[str] = Field(default_factory=list)
    when_unknown: WhenUnknown = "allow"


class ProvisionableShape(RuleModel):
    """A GPU node the cluster can create on demand (GKE node auto-provisioning, a managed node
    group scaled to zero...): the labels it would carry and its allocatable GPU resources."""

    name: str = Field(min_length=1, examples=["h100-pool"])
    labels: dict[str, str] = Field(default_factory=dict)
    gpus: dict[str, int] = Field(min_length=1, examples=[{"nvidia.com/gpu": 8}])

    @field_validator("gpus")
    @classmethod
    def _positive(cls, value: dict[str, int]) -> dict[str, int]:
        bad = sorted(k for k, v in value.items() if v <= 0)
        if bad:
            raise Invalid(
                f"GPU counts must be positive: {', '.join(bad)}",
                f"give {bad[0]} the GPUs such a node has, e.g. 8, or remove the entry",
                (bad[0],),
            )
        return value


class SchedulableRule(RuleModel):
    """Pods that no node could ever run: refuse them at apply time, not after an hour Pending."""

    mode: ModeName = "enforce"
    # GPU nodes that do not exist yet but can be created for a pending pod. With none listed
    # and `autoscaling: unknown`, a pod that no existing node fits may be waiting for a node
    # the autoscaler will create: warn, never deny. `autoscaling: none` states the cluster
    # creates no nodes: the existing ones are all there is (strict).
    autoscaling: Literal["unknown", "none"] = "unknown"
    provisionable: list[ProvisionableShape] = Field(default_factory=list)
    # Read the shapes Karpenter NodePools and Cluster API scale-from-zero groups can create.
    # false: only `provisionable` counts (a cluster whose GPU pools the API does not show, e.g.
    # a managed node group at zero beside Karpenter, would otherwise see false denials).
    cluster_autoscalers: bool = True
    # Node-label prefixes that describe GPUs; selectors on other labels are not judged.
    gpu_label_prefixes: list[str] = Field(
        default_factory=lambda: [
            "nvidia.com/",
            "amd.com/",
            "gpu.intel.com/",
            "cloud.google.com/gke-accelerator",
            "k8s.amazonaws.com/accelerator",
        ]
    )
    # Resources the device plugin serves one at a time (failRequestsGreaterThanOne), e.g.
    # time-sliced "nvidia.com/gpu.shared"; a pod asking more than 1 of them never starts.
    single_device_resources: list[str] = Field(default_factory=list)
    when_unknown: WhenUnknown = "allow"


class QueueRule(RuleModel):
    """GPU workloads go through a batch queue (Kueue or KAI Scheduler), one that exists and
    could ever admit them: said at apply time, not after hours suspended."""

    mode: ModeName = "off"
    # Label the workload with its namespace's Kueue LocalQueue when it names none: the one
    # `defaultQueue` names, else a LocalQueue named `default`, else the namespace's only one.
    mutate: bool = True
    default_queue: str = Field(default="", examples=["team-a-queue"])
    # Labels that name a Kueue LocalQueue, and those that name a KAI/Run:ai Queue.
    kueue_labels: list[str] = Field(default_factory=lambda: ["kueue.x-k8s.io/queue-name"])
    kai_labels: list[str] = Field(default_factory=lambda: ["kai.scheduler/queue", "runai/queue"])
    # Annotations read as a Kueue queue name too (older Kueue releases read this one).
    kueue_annotations: list[str] = Field(default_factory=lambda: ["kueue.x-k8s.io/queue-name"])
    when_unknown: WhenUnknown = "allow"


class SpendRule(RuleModel):
    """Guardrails on what one pod or one workload may spend of a team's GPUs, and for how long
    a GPU job may keep them. Nothing is limited or set until a setting here says so."""

    mode: ModeName = "enforce"
    max_per_pod: dict[str, PositiveInt] = Field(
        default_factory=dict,
        examples=[{"nvidia.com/gpu": 8}],
        description=(
            "Resource -> the most GPUs one pod may ask (its containers as the scheduler counts "
            "them; a share of a GPU by its part): below the budget, so one pod cannot take it."
        ),
    )
    max_per_workload: dict[str, PositiveInt] = Field(
        default_factory=dict,
        examples=[{"nvidia.com/gpu": 16}],
        description=(
            "Resource -> the most GPUs one workload may ask, every template and replica at once "
            "(as gpu-quota sums them)."
        ),
    )
    mutate: bool = Field(
        default=True,
        description=(
            "Set ttlSecondsAfterFinished and activeDeadlineSeconds on GPU jobs that set none; "
            "false: only judge the deadline."
        ),
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        examples=[86400],
        description=(
            "Seconds a finished GPU job is kept before it is deleted: set on Jobs, Kubeflow "
            "training jobs (runPolicy), RayJobs and JobSets that set none."
        ),
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        examples=[172800],
        description=(
            "Seconds a GPU job may run before it is stopped: set on Jobs, Kubeflow training "
            "jobs (runPolicy) and RayJobs that set none."
        ),
    )
    max_active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        examples=[604800],
        description=(
            "The longest activeDeadlineSeconds a GPU job may set; one that sets none gets "
            "activeDeadlineSeconds, or is refused when that is unset."
        ),
    )

    @model_validator(mode="after")
    def _default_within_max(self) -> SpendRule:
        most, given = self.max_active_deadline_seconds, self.active_deadline_seconds
        if most is not None and given is not None and given > most:
            raise Invalid(
                f"activeDeadlineSeconds {given} is above maxActiveDeadlineSeconds {most}",
                "lower activeDeadlineSeconds or raise maxActiveDeadlineSeconds",
                ("activeDeadlineSeconds",),
            )
        return self


class RuleSettings(RuleModel):
    """The settings of every rule, one entry per rule id (a rule file's `rules:`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=None)

    gpu_requests_limits: RequestsLimitsRule = Field(
        default_factory=RequestsLimitsRule, alias="gpu-requests-limits"
    )
    gpu_whole_quantity: ValidationRule = Field(
        default_factory=ValidationRule, alias="gpu-whole-quantity"
    )
    gpu_mig_mixed: ValidationRule = Field(default_factory=ValidationRule, alias="gpu-mig-mixed")
    gpu_tolerations: TolerationsRule = Field(
        default_factory=TolerationsRule, alias="gpu-tolerations"
    )
    gpu_shm: ShmRule = Field(default_factory=ShmRule, alias="gpu-shm")
    gpu_probe_delays: ProbesRule = Field(default_factory=ProbesRule, alias="gpu-probe-delays")
    visible_devices: VisibleDevicesRule = Field(
        default_factory=VisibleDevicesRule, alias="visible-devices"
    )
    privileged_gpu: PrivilegedRule = Field(default_factory=PrivilegedRule, alias="privileged-gpu")
    host_gpu_devices: HostDevicesRule = Field(
        default_factory=HostDevicesRule, alias="host-gpu-devices"
    )
    gpu_toleration_without_gpu: WarnRule = Field(
        default_factory=WarnRule, alias="gpu-toleration-without-gpu"
    )
    gpu_memory_limit: WarnRule = Field(default_factory=WarnRule, alias="gpu-memory-limit")
    gpu_readiness_probe: WarnRule = Field(default_factory=WarnRule, alias="gpu-readiness-probe")
    gpu_init_container: WarnRule = Field(default_factory=WarnRule, alias="gpu-init-container")
    gpu_quota: QuotaRule = Field(default_factory=QuotaRule, alias="gpu-quota")
    gpu_priority_class: PriorityRule = Field(
        default_factory=PriorityRule, alias="gpu-priority-class"
    )
    gpu_schedulable: SchedulableRule = Field(
        default_factory=SchedulableRule, alias="gpu-schedulable"
    )
    gpu_queue: QueueRule = Field(default_factory=QueueRule, alias="gpu-queue")
    gpu_spend: SpendRule = Field(default_factory=SpendRule, alias="gpu-spend")
