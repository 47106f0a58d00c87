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
        workload: tuple[str, str] | None = None,
        suspended: bool = False,
        queue_meta: QueueMeta | None = None,
        totals: Totals | None = None,
        gpu_specs: tuple[Mapping[str, Any], ...] = (),
        deadline: tuple[str, object] | None = None,
    ) -> None:
        self.rules = rules  # the rules in force for the namespace (overrides applied)
        self.namespace = namespace
        self.kind = kind
        self.operation = operation
        self.facts = facts  # None: no cluster facts (offline audit)
        # The DRA objects claims are resolved against: the facts', or (an audit without
        # cluster facts) those found in the audited files alone.
        self.dra = dra if dra is not None or facts is None else facts.dra
        # (kind, name) of the DaemonSet the object is or names as its controller: a node
        # agent's denial advises exempting that DaemonSet.
        self.workload = workload
        # The object's suspend field is true (a Job Kueue queues): its pods are held back, so
        # it takes nothing of a GPU budget now; it is judged when it is released.
        self.suspended = suspended
        # Where a batch queue reads the object's queue name (gpu-queue's
        # `queue.queue_metadata`); None: no queue takes the object as such.
        self.queue_meta = queue_meta
        # What the validations read of the whole object (`judging`), unknown while mutating:
        # a controller's GPU asks, all its pods at once (None for a pod, or a controller
        # asking no GPU); the pod specs of its templates that ask for GPUs, where its pods may
        # run, for gpu-queue's flavors (empty for a pod: its own view has it); and the
        # (dotted path, value) of its activeDeadlineSeconds for kinds that have one
        # (gpu-spend; None for other kinds, a value of None when it is unset).
        self.totals = totals
        self.gpu_specs = gpu_specs
        self.deadline = deadline

    def judging(
        self,
        queue_meta: QueueMeta | None,
        totals: Totals | None,
        gpu_specs: tuple[Mapping[str, Any], ...],
        deadline: tuple[str, object] | None,
    ) -> Context:
        """The context for the validations: this one with what they read of the whole object
        as it will be stored (mutations applied), a new value."""
        return Context(
            self.rules,
            self.namespace,
            self.kind,
            self.operation,
            self.facts,
            self.dra,
            self.workload,
            self.suspended,
            queue_meta,
            totals,
            gpu_specs,
            deadline,
        )

    @property
    def settings(self) -> RuleSettings:
        """Each rule's settings, by rule id (`ctx.settings.gpu_shm.max_size`)."""
        return self.rules.settings
