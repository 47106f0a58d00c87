"""Rule-set models: the single source of truth for what a file in `rules/` may say.

Every rule has its own model keyed by its rule id, so messages, audit annotations and rule
files all use one name. Models are frozen: a loaded rule set is shared by concurrent requests
and swapped whole, never edited in place.
"""

from __future__ import annotations

import fnmatch
import re
from fractions import Fraction
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from webhook.quantity import QuantityError, parse_quantity

__all__ = [
    "Mode",
    "RuleSet",
    "Rules",
]

Mode = Literal["enforce", "warn", "audit", "off"]


class _Model(BaseModel):
    """Strict by default: an unknown key in a rule file is a typo, and typos must not pass."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


def _quantity(value: str) -> str:
    try:
        parse_quantity(value)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    return value


class ValidationRule(_Model):
    mode: Mode = "enforce"


class WarnRule(_Model):
    mode: Mode = "warn"


class RequestsLimitsRule(_Model):
    """GPU requests must equal limits; the apiserver refuses anything else."""

    mode: Mode = "enforce"
    # Copy a GPU that is only in requests into limits (the usual slip) instead of denying.
    fix: bool = True


class TolerationSpec(_Model):
    """The taint toleration that pods asking for any of `resources` get."""

    resources: list[str] = Field(min_length=1)
    key: str = Field(min_length=1)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class TolerationsRule(_Model):
    mutate: bool = True
    tolerations: list[TolerationSpec] = Field(
        default_factory=lambda: [
            TolerationSpec(resources=["nvidia.com/*"], key="nvidia.com/gpu"),
            TolerationSpec(resources=["amd.com/gpu"], key="amd.com/gpu"),
        ]
    )


class ShmRule(_Model):
    """Size of the memory-backed /dev/shm; NCCL and PyTorch data loaders need far over 64Mi."""

    mutate: bool = True
    volume_name: str = Field(default="dshm", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    memory_fraction: float = Field(default=0.5, gt=0, le=1)
    min_size: str = "1Gi"
    max_size: str = "16Gi"
    # Used when the container sets no memory limit, so there is nothing to take a fraction of.
    default_size: str = "8Gi"

    _check_sizes = field_validator("min_size", "max_size", "default_size")(_quantity)

    @cached_property
    def sizes(self) -> tuple[Fraction, Fraction, Fraction, Fraction]:
        """(fraction, min, max, default) as exact numbers, parsed once per rule set."""
        return (
            Fraction(str(self.memory_fraction)),
            parse_quantity(self.min_size),
            parse_quantity(self.max_size),
            parse_quantity(self.default_size),
        )

    @model_validator(mode="after")
    def _min_below_max(self) -> ShmRule:
        if parse_quantity(self.min_size) > parse_quantity(self.max_size):
            raise ValueError(f"minSize {self.min_size} is larger than maxSize {self.max_size}")
        return self


class ProbesRule(_Model):
    """Model loading takes minutes; probes tuned for a web app kill GPU servers while loading."""

    mutate: bool = True
    # raise-delays: lift initialDelaySeconds; startup-probe: add a startupProbe instead.
    strategy: Literal["raise-delays", "startup-probe"] = "raise-delays"
    readiness_min_delay_seconds: int = Field(default=60, ge=0)
    liveness_min_delay_seconds: int = Field(default=180, ge=0)
    # startup-probe strategy: how long the container may take to start before it is killed.
    startup_budget_seconds: int = Field(default=600, ge=10)
    startup_period_seconds: int = Field(default=10, ge=1)


class VisibleDevicesRule(_Model):
    mode: Mode = "enforce"
    allowed_values: list[str] = Field(default_factory=lambda: ["void", "none", ""])


class HostDevicesRule(_Model):
    mode: Mode = "enforce"
    paths: list[str] = Field(default_factory=lambda: ["/dev", "/dev/nvidia*", "/dev/dri*"])


class Rules(_Model):
    """One entry per rule id."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=None, populate_by_name=True
    )

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
    privileged_gpu: ValidationRule = Field(default_factory=ValidationRule, alias="privileged-gpu")
    host_gpu_devices: HostDevicesRule = Field(
        default_factory=HostDevicesRule, alias="host-gpu-devices"
    )
    gpu_toleration_without_gpu: WarnRule = Field(
        default_factory=WarnRule, alias="gpu-toleration-without-gpu"
    )
    gpu_memory_limit: WarnRule = Field(default_factory=WarnRule, alias="gpu-memory-limit")
    gpu_readiness_probe: WarnRule = Field(default_factory=WarnRule, alias="gpu-readiness-probe")
    gpu_init_container: WarnRule = Field(default_factory=WarnRule, alias="gpu-init-container")


DEFAULT_GPU_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/mig-*",
    "amd.com/gpu",
    "gpu.intel.com/*",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "*.shared",
]


class RuleSet(_Model):
    """A whole rule set as loaded from the rule folder."""

    gpu_resources: list[str] = Field(default_factory=lambda: list(DEFAULT_GPU_RESOURCES))
    exempt_namespaces: list[str] = Field(
        default_factory=lambda: [
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "gpu-operator",
            "gpu-admission",
        ]
    )
    rules: Rules = Field(default_factory=Rules)

    @cached_property
    def _gpu_pattern(self) -> re.Pattern[str]:
        return re.compile("|".join(fnmatch.translate(p) for p in self.gpu_resources) or "(?!)")

    def is_gpu_resource(self, name: str) -> bool:
        """Whether a resource name counts as a GPU (exact names and shell-style patterns)."""
        return self._gpu_pattern.match(name) is not None
