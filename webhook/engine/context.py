"""What a check may read besides the pod: the compiled rules in force, and the cluster facts."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from webhook.engine.queueing import QueueMeta
from webhook.engine.totals import Totals
from webhook.facts.dra import DraFacts
from webhook.facts.model import Facts, Node
from webhook.namepatterns import NamePatterns
from webhook.ruleset.models import QuotaBudget, RuleSettings, TolerationSpec

__all__ = ["Context", "RulesInForce"]


class RulesInForce(Protocol):
    """What checks read of the rules in force for a namespace (`compiled.CompiledRules`).

    A protocol, so the checks depend on what they read and the compiled rules, which list and
    prepare the checks, can import them without the checks importing them back.
    """

    @property
    def settings(self) -> RuleSettings: ...

    def is_gpu(self, name: str) -> bool: ...

    # gpu-tolerations (placement.prepare): each toleration with its resource-name pattern, the
    # DeviceClass names and drivers it is for, and the GPU taint keys.
    @property
    def tolerations(self) -> tuple[tuple[TolerationSpec, re.Pattern[str]], ...]: ...
    @property
    def class_tolerations(self) -> tuple[tuple[NamePatterns, NamePatterns], ...]: ...
    @property
    def taint_keys(self) -> frozenset[str]: ...

    # DRA: the DeviceClasses that hand out GPUs.
    @property
    def gpu_class_names(self) -> NamePatterns: ...
    @property
    def gpu_drivers(self) -> NamePatterns: ...

    # gpu-shm (shm.prepare), gpu-quota (quota.prepare), gpu-schedulable (schedulable.prepare).
    @property
    def shm_sizes(self) -> tuple[int, int, int, int, int]: ...
    @property
    def budgets(self) -> tuple[tuple[QuotaBudget, NamePatterns | None], ...]: ...
    def budget_in(
        self, budget: QuotaBudget, namespace: str, labels: Mapping[str, str] | None
    ) -> bool: ...
    @property
    def gpu_label_prefixes(self) -> tuple[str, ...]: ...
    @property
    def provisionable(self) -> tuple[Node, ...]: ...
    @property
    def provisioning_known(self) -> bool: ...
    @property
    def cluster_autoscalers(self) -> bool: ...
    @property
    def provisioning_namespaces(self) -> NamePatterns: ...

    # How old cluster facts may be before the cluster-aware rules stop trusting them.
    @property
    def max_staleness_seconds(self) -> int: ...


class Context:
    """Everything a check reads apart from the pod view. Immutable: checks do no I/O.

    A plain class, not a dataclass: the slots keep it small and quick to build per review.
    """

    __slots__ = (
        "deadline",
        "dra",
        "facts",
        "gpu_specs",
        "kind",
        "namespace",
        "operation",
        "queue_meta",
        "rules",
        "suspended",
        "totals",
        "workload",
    )

    def __init__(
        self,
        rules: RulesInForce,
        namespace: str,
        kind: str,
        operation: str = "CREATE",
        facts: Facts | None = None,
        dra: DraFacts | None = None,
    ) -> None:
        self.rules = rules  # the rules in force for the namespace (overrides applied)
        self.namespace = namespace
        self.kind = kind
        self.operation = operation
        self.facts = facts  # None: no cluster facts (offline audit)
        # The DRA objects claims are resolved against: the facts', or (an audit without
        # cluster facts) those found in the audited files alone.
        self.dra = dra if dra is not None or facts is None else facts.dra
        # A controller's GPU asks, all its pods at once (set before validation); None for a
        # pod, or a controller asking no GPU.
        self.totals: Totals | None = None
        # (kind, name) of the DaemonSet the object is or names as its controller (set before
        # validation): a node agent's denial advises exempting that DaemonSet.
        self.workload: tuple[str, str] | None = None
        # Where a batch queue reads the object's queue name (gpu-queue's
        # `queue.queue_metadata`); None: no queue takes the object as such.
        self.queue_meta: QueueMeta | None = None
        # The pod specs of the object's templates that ask for GPUs (set with `totals`): where
        # its pods may run, for gpu-queue's flavors. Empty for a pod: its own view has it.
        self.gpu_specs: tuple[Mapping[str, Any], ...] = ()
        # The object's suspend field is true (a Job Kueue queues): its pods are held back, so
        # it takes nothing of a GPU budget now; it is judged when it is released.
        self.suspended = False
        # (dotted path, value) of the object's activeDeadlineSeconds for kinds that have one
        # (gpu-spend); None for other kinds, a value of None when it is unset.
        self.deadline: tuple[str, object] | None = None

    @property
    def settings(self) -> RuleSettings:
        """Each rule's settings, by rule id (`ctx.settings.gpu_shm.max_size`)."""
        return self.rules.settings
