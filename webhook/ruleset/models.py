"""Rule-set models: the single source of truth for what a file in `rules/` may say.

Every rule has its own model keyed by its rule id (`rulemodels.py`), so messages, audit
annotations and rule files all use one name. Models are frozen: a loaded rule set is shared
by concurrent requests and swapped whole, never edited in place.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from webhook.modelerrors import Invalid, Nested
from webhook.namepatterns import NamePatterns, is_pattern
from webhook.ruleset.defaults import (
    DEFAULT_GPU_RESOURCES,
    DEFAULT_PROVISIONING_NAMESPACES,
)
from webhook.ruleset.exemptions import Exemptions
from webhook.ruleset.rulemodels import (
    ModeName,
    ProbesRule,
    QuotaBudget,
    RuleModel,
    RuleSettings,
    SpendRule,
    TolerationSpec,
)
from webhook.ruleset.workloads import WorkloadKind
from webhook.selectors import LabelSelector

__all__ = [
    "RULE_IDS",
    "Exemptions",
    "GpuSharing",
    "ModeName",
    "Override",
    "ProbesRule",
    "QuotaBudget",
    "RuleSet",
    "RuleSettings",
    "SpendRule",
    "TolerationSpec",
]


class GpuDeviceClasses(RuleModel):
    """Which DRA DeviceClasses hand out GPUs: a claim drawing from one makes its containers GPU
    containers for every rule. A class counts when its name matches `names`, or when one of
    its CEL selectors requires a driver in `drivers` (device.driver == "gpu.nvidia.com"); the
    drivers are read from the DeviceClass itself, so they count only where the cluster's
    DeviceClasses are known. The same holds for a class's devices asked as a plain resource
    (Kubernetes 1.34+): `deviceclass.resource.kubernetes.io/<class>`, or the class's
    `extendedResourceName`; `deviceclass.resource.kubernetes.io/gpu.nvidia.com` is a GPU ask
    by the class's name alone. A claim or implicit resource whose class is not known is no
    GPU ask, but its container is never given NVIDIA_VISIBLE_DEVICES=void and is warned
    about."""

    names: list[str] = Field(
        default_factory=lambda: ["gpu.nvidia.com", "mig.nvidia.com", "gpu.amd.com", "gpu.intel.com"]
    )
    drivers: list[str] = Field(
        # NVIDIA's k8s-dra-driver-gpu, AMD's k8s-gpu-dra-driver, Intel's GPU resource driver.
        # Not NVIDIA's compute-domain.nvidia.com: its devices are IMEX channels, not GPUs.
        default_factory=lambda: ["gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com"]
    )


RULE_IDS: tuple[str, ...] = tuple(
    str(f.alias) for f in RuleSettings.model_fields.values() if f.alias is not None
)
# Rules whose settings are checked together (ShmRule: minSize <= maxSize): rule id -> the
# RuleSettings field and the rule's model.
_CHECKED_TOGETHER: dict[str, tuple[str, type[RuleModel]]] = {
    str(f.alias): (name, f.annotation)
    for name, f in RuleSettings.model_fields.items()
    if isinstance(f.annotation, type)
    and issubclass(f.annotation, RuleModel)
    and f.annotation.__pydantic_decorators__.model_validators
}


def _across_settings(err: Any) -> bool:
    """A rule model's own check of its settings together: the error sits at the rule."""
    return len(err.get("loc", ())) == 1 and err.get("type") == "value_error"


class Override(RuleModel):
    """Settings for the namespaces an override selects, layered over the base rules.

    Precedence, most specific last (it wins): a namespace selector alone < name patterns <
    exact names; with both names and a selector, both must match and the selector breaks
    ties within its name rank. Two overrides of equal rank that set the same setting for
    the same namespace are a conflict (`rules check` reports the ones it can see).
    """

    name: str = Field(min_length=1, examples=["research"])
    namespaces: list[str] = Field(default_factory=list, examples=[["research-*"]])
    namespace_selector: LabelSelector | None = None
    rules: dict[str, dict[str, Any]] = Field(examples=[{"gpu-shm": {"maxSize": "32Gi"}}])

    @field_validator("rules", mode="before")
    @classmethod
    def _yaml_modes(cls, value: Any) -> Any:
        """The settings stay raw (they merge onto the base), but an unquoted `off` is "off"
        here too, so comparing two overrides' modes compares what they mean."""
        if not isinstance(value, dict):
            return value
        return {
            rule: {k: "off" if k == "mode" and v is False else v for k, v in cfg.items()}
            if isinstance(cfg, dict)
            else cfg
            for rule, cfg in value.items()
        }

    @field_validator("rules")
    @classmethod
    def _settings_valid_on_their_own(cls, value: dict[str, dict[str, Any]]) -> Any:
        """Each partial setting must be valid on its own, so typos (an unknown rule id too)
        fail at load, not at use, each reported where it is written, whatever else the
        override lacks. What a rule's settings must agree on together (minSize <= maxSize)
        depends on the rules the override is laid over: `RuleSet` checks that."""
        try:
            RuleSettings.model_validate(value)
        except ValidationError as exc:
            errors = [e for e in exc.errors(include_url=False) if not _across_settings(e)]
            if errors:
                raise Nested(((), RuleSettings, errors)) from None
        return value

    @model_validator(mode="after")
    def _selects_something(self) -> Override:
        if not self.namespaces and self.namespace_selector is None:
            raise Invalid(
                "an override needs namespaces or a namespaceSelector",
                "add namespaces: [research-*] or namespaceSelector: {matchLabels: {team: x}}",
            )
        return self

    @property
    def rank(self) -> tuple[int, int]:
        if not self.namespaces:
            names = 0
        elif any(is_pattern(n) for n in self.namespaces):
            names = 1
        else:
            names = 2
        return names, int(self.namespace_selector is not None)

    def name_patterns(self) -> NamePatterns | None:
        return NamePatterns(self.namespaces) if self.namespaces else None


class ClusterSettings(RuleModel):
    # Cluster-aware rules treat facts older than this as unknown (see each rule's whenUnknown).
    max_staleness_seconds: int = Field(default=300, ge=1)
    # What the cluster's autoscalers can create is a cluster-wide fact: read it only from
    # namespaces tenants cannot write, or a tenant's object would shape every other pod's
    # verdict.
    provisioning_namespaces: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PROVISIONING_NAMESPACES),
        description=(
            "Namespaces whose Cluster API MachineSets, MachineDeployments and MachinePools "
            "say which GPU nodes the cluster can create (patterns allowed; Karpenter's "
            "NodePools are cluster-scoped and always read). Objects elsewhere are ignored: "
            "list only namespaces tenants cannot create objects in."
        ),
    )


class GpuSharing(RuleModel):
    """Schedulers that give a pod part of a GPU through annotations, not a resource: KAI
    Scheduler and Run:ai (`gpu-fraction: "0.5"`, `gpu-memory: "2000"`). A pod that names one of
    them in spec.schedulerName and carries one of the annotations is a GPU pod (not one that
    names its node: nodeName skips the scheduler that would honour the ask): the container the
    sharing applies to (the one `containerAnnotation` names, else the first container) counts
    as asking for a GPU, and the NVIDIA_VISIBLE_DEVICES the scheduler's own webhook sets in it
    from the pod's ConfigMap (valueFrom.configMapKeyRef to `<configMapAnnotation>-<n>` for
    containers[n], `-i<n>` for init containers, key NVIDIA_VISIBLE_DEVICES or, before KAI
    v0.7.4, RUNAI-VISIBLE-DEVICES; its binder fills it at bind time) is admitted, unless the
    facts show that ConfigMap already there as the pod is created. Writes of those keys into
    such ConfigMaps are refused to all but `configMapWriters`."""

    schedulers: list[str] = Field(default_factory=lambda: ["kai-scheduler", "runai-scheduler"])
    annotations: list[str] = Field(default_factory=lambda: ["gpu-fraction", "gpu-memory"])
    container_annotation: str = "gpu-fraction-container-name"
    # The annotation in which the scheduler's webhook names the pod's ConfigMaps: a
    # NVIDIA_VISIBLE_DEVICES from a ConfigMap of another name is not the scheduler's.
    config_map_annotation: str = "runai/shared-gpu-configmap"
    # What the shared GPUs are, for the rules keyed by resource name (gpu-tolerations).
    resource: str = Field(default="nvidia.com/gpu", min_length=1)
    # Who may write a device key (NVIDIA_VISIBLE_DEVICES, RUNAI-VISIBLE-DEVICES) into a
    # ConfigMap owned by a pod or named as the scheduler names them (`*-shared-gpu-<n>`): the
    # scheduler's binder (KAI's chart binds the ClusterRole kai-binder to the ServiceAccount
    # `binder` of the namespace it is installed in, kai-scheduler by its docs). Usernames as
    # the API server reports them.
    config_map_writers: list[str] = Field(
        default_factory=lambda: ["system:serviceaccount:kai-scheduler:binder"],
        examples=[["system:serviceaccount:kai-scheduler:binder"]],
    )


class RuleSet(RuleModel):
    """A whole rule set as loaded from the rule folder."""

    # A ceiling on every rule's mode: `audit` is shadow mode (nothing denied or changed,
    # everything recorded), `warn` allows all with warnings, `enforce` uses each rule's mode.
    mode: ModeName = "enforce"
    gpu_resources: list[str] = Field(default_factory=lambda: list(DEFAULT_GPU_RESOURCES))
    gpu_device_classes: GpuDeviceClasses = Field(default_factory=GpuDeviceClasses)
    gpu_sharing: GpuSharing = Field(default_factory=GpuSharing)
    exemptions: Exemptions = Field(default_factory=Exemptions)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    rules: RuleSettings = Field(default_factory=RuleSettings)
    overrides: list[Override] = Field(default_factory=list)
    # CRDs that carry pod specs, declared by the platform team (webhook/ruleset/workloads.py
    # holds the shipped ones; a declaration of the same group and kind replaces a shipped one).
    workloads: list[WorkloadKind] = Field(default_factory=list)

    @field_validator("workloads")
    @classmethod
    def _unique_workloads(cls, workloads: list[WorkloadKind]) -> list[WorkloadKind]:
        seen: set[tuple[str, str]] = set()
        for i, w in enumerate(workloads):
            if w.key in seen:
                raise Invalid(
                    f"each kind may be declared once: {w.group or 'core'}/{w.kind}",
                    "keep one entry per group and kind (a later file's entry replaces an "
                    "earlier file's)",
                    (i,),
                )
            seen.add(w.key)
            if w.key == ("", "Pod"):
                raise Invalid(
                    "Pod is built in and cannot be redeclared",
                    "remove this entry: pods are always judged",
                    (i,),
                )
        return workloads

    @model_validator(mode="after")
    def _overrides_fit_the_rules(self) -> RuleSet:
        """An override laid over these rules leaves settings that agree with each other (a
        minSize it sets is not above the maxSize of the rules, and so on): checked here, at
        load, rather than failing the first review in a namespace it selects."""
        found: list[tuple[tuple[str | int, ...], type[RuleModel], list[Any]]] = []
        for i, override in enumerate(self.overrides):
            for rule_id, settings in override.rules.items():
                if rule_id not in _CHECKED_TOGETHER:
                    continue
                name, model = _CHECKED_TOGETHER[rule_id]
                base = getattr(self.rules, name).model_dump(by_alias=True)
                try:
                    model.model_validate({**base, **settings})
                except ValidationError as exc:
                    where = ("overrides", i, "rules", rule_id)
                    found.append((where, model, exc.errors(include_url=False)))
        if found:
            raise Nested(*found)
        return self

    @field_validator("overrides")
    @classmethod
    def _unique_override_names(cls, overrides: list[Override]) -> list[Override]:
        seen: set[str] = set()  # linear: rule sets may hold thousands
        for i, o in enumerate(overrides):
            if o.name in seen:
                raise Invalid(
                    f"override names must be unique: {o.name}",
                    "rename one of them, or merge the two into one override",
                    (i, "name"),
                )
            seen.add(o.name)
        return overrides

    def gpu_names(self) -> NamePatterns:
        """The GPU resource names and patterns, compiled (the compiled rules keep one)."""
        return NamePatterns(self.gpu_resources)
