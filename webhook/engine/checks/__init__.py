"""The rules: pure functions over pod views, grouped by what they protect.

Validations take a pod view and their own config and yield findings. Mutations take a working
copy of the pod spec (see `patch.working_copy` for what they may edit in place) with the view
of the original, change the copy, and never read anything else; the engine diffs the copy
into a JSON patch. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from webhook.engine.checks import (
    hostdevices,
    isolation,
    placement,
    priority,
    probes,
    queue,
    quota,
    resources,
    schedulable,
    shm,
    spend,
)
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import PodView
from webhook.ruleset.models import RuleSettings

__all__ = [
    "BUDGET_RULES",
    "CLUSTER_RULES",
    "ISOLATION_RULES",
    "MUTATIONS",
    "VALIDATIONS",
    "Mutation",
    "Validation",
]


@dataclass(frozen=True, slots=True)
class Validation:
    rule: str
    # The rule's own entry in a rule set's `rules:`; its `mode` says how the rule judges.
    settings: Callable[[RuleSettings], Any]
    check: Callable[[PodView, Context], Iterable[Finding]]
    gpu_only: bool  # True: skipped on pods that ask for no GPU (the fast path)
    # Needs cluster facts: not run at all when there is no source of them (an offline audit
    # reports these rules as not checked); stale facts are each rule's whenUnknown to handle.
    needs_cluster: bool = False
    # Part of it needs no facts (an allowed list): that part runs without them too, and the
    # check itself leaves what needs the cluster unjudged when `ctx.facts` is None.
    offline_part: bool = False


@dataclass(frozen=True, slots=True)
class Mutation:
    rule: str
    # Whether the rule's settings turn the change on (`mutate`, or `fix` for gpu-requests-limits).
    enabled: Callable[[RuleSettings], bool]
    apply: Callable[[dict[str, Any], PodView, Context], bool]  # True when it changed something
    any_pod: bool = False  # False: GPU pods only; True: it decides itself which pods it edits


# Order matters for mutations: limits are fixed first so later rules see the GPU in limits.
MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "gpu-requests-limits",
        attrgetter("gpu_requests_limits.fix"),
        resources.copy_requests_to_limits,
    ),
    Mutation(
        "gpu-tolerations", attrgetter("gpu_tolerations.mutate"), placement.add_gpu_tolerations
    ),
    Mutation("gpu-shm", attrgetter("gpu_shm.mutate"), shm.add_shm),
    Mutation("gpu-probe-delays", attrgetter("gpu_probe_delays.mutate"), probes.adjust_probes),
    Mutation(
        "gpu-priority-class",
        attrgetter("gpu_priority_class.mutate"),
        priority.inject_priority_class,
    ),
    # Runs on every pod that can reach GPU nodes, not only GPU pods (see `any_pod`).
    Mutation(
        "visible-devices",
        attrgetter("visible_devices.mutate"),
        isolation.hide_devices,
        any_pod=True,
    ),
)

VALIDATIONS: tuple[Validation, ...] = (
    Validation(
        "gpu-requests-limits",
        attrgetter("gpu_requests_limits"),
        resources.requests_equal_limits,
        gpu_only=True,
    ),
    Validation(
        "gpu-whole-quantity",
        attrgetter("gpu_whole_quantity"),
        resources.whole_quantities,
        gpu_only=False,
    ),
    Validation(
        "gpu-mig-mixed", attrgetter("gpu_mig_mixed"), resources.mig_not_mixed, gpu_only=True
    ),
    Validation(
        "visible-devices", attrgetter("visible_devices"), isolation.visible_devices, gpu_only=False
    ),
    Validation(
        "privileged-gpu", attrgetter("privileged_gpu"), isolation.privileged_gpu, gpu_only=False
    ),
    Validation(
        "host-gpu-devices",
        attrgetter("host_gpu_devices"),
        hostdevices.host_gpu_devices,
        gpu_only=False,
    ),
    Validation(
        "gpu-toleration-without-gpu",
        attrgetter("gpu_toleration_without_gpu"),
        placement.toleration_without_gpu,
        gpu_only=False,
    ),
    Validation(
        "gpu-memory-limit", attrgetter("gpu_memory_limit"), resources.memory_limit, gpu_only=True
    ),
    Validation(
        "gpu-readiness-probe",
        attrgetter("gpu_readiness_probe"),
        probes.readiness_probe,
        gpu_only=True,
    ),
    Validation(
        "gpu-init-container",
        attrgetter("gpu_init_container"),
        resources.init_container_gpu,
        gpu_only=True,
    ),
    # A KServe predictor whose runtime's /dev/shm cannot be told gets none: say what to set.
    Validation("gpu-shm", attrgetter("gpu_shm"), shm.runtime_shm_unknown, gpu_only=True),
    Validation(
        "gpu-quota", attrgetter("gpu_quota"), quota.gpu_quota, gpu_only=True, needs_cluster=True
    ),
    Validation(
        "gpu-priority-class",
        attrgetter("gpu_priority_class"),
        priority.gpu_priority_class,
        gpu_only=True,
        needs_cluster=True,
        offline_part=True,
    ),
    Validation(
        "gpu-schedulable",
        attrgetter("gpu_schedulable"),
        schedulable.gpu_schedulable,
        gpu_only=True,
        needs_cluster=True,
    ),
    Validation(
        "gpu-queue", attrgetter("gpu_queue"), queue.gpu_queue, gpu_only=True, needs_cluster=True
    ),
    Validation("gpu-spend", attrgetter("gpu_spend"), spend.gpu_spend, gpu_only=True),
)


ISOLATION_RULES = isolation.ISOLATION_RULES

# The rules that judge what a workload takes of the namespace's GPUs now: a suspended object
# released by an update is judged by these alone for the templates the update left as they were.
BUDGET_RULES = frozenset({"gpu-quota"})

# Rules that judge nothing without cluster facts; audits list them as not checked.
CLUSTER_RULES: tuple[str, ...] = tuple(v.rule for v in VALIDATIONS if v.needs_cluster)
