"""The rules: pure functions over pod views, grouped by what they protect.

Validations take a pod view and their own config and yield findings. Mutations take a working
copy of the pod spec (see `patch.working_copy` for what they may edit in place) with the view
of the original, change the copy, and never read anything else; the engine diffs the copy
into a JSON patch. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
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
    apply: Callable[[dict[str, Any], PodView, Context], bool]  # True when it changed something
    any_pod: bool = False  # False: GPU pods only; True: it decides itself which pods it edits


# Order matters for mutations: limits are fixed first so later rules see the GPU in limits.
MUTATIONS: tuple[Mutation, ...] = (
    Mutation("gpu-requests-limits", resources.copy_requests_to_limits),
    Mutation("gpu-tolerations", placement.add_gpu_tolerations),
    Mutation("gpu-shm", shm.add_shm),
    Mutation("gpu-probe-delays", probes.adjust_probes),
    Mutation("gpu-priority-class", priority.inject_priority_class),
    # Runs on every pod that can reach GPU nodes, not only GPU pods (see `any_pod`).
    Mutation("visible-devices", isolation.hide_devices, any_pod=True),
)

VALIDATIONS: tuple[Validation, ...] = (
    Validation("gpu-requests-limits", resources.requests_equal_limits, gpu_only=True),
    Validation("gpu-whole-quantity", resources.whole_quantities, gpu_only=False),
    Validation("gpu-mig-mixed", resources.mig_not_mixed, gpu_only=True),
    Validation("visible-devices", isolation.visible_devices, gpu_only=False),
    Validation("privileged-gpu", isolation.privileged_gpu, gpu_only=False),
    Validation("host-gpu-devices", hostdevices.host_gpu_devices, gpu_only=False),
    Validation("gpu-toleration-without-gpu", placement.toleration_without_gpu, gpu_only=False),
    Validation("gpu-memory-limit", resources.memory_limit, gpu_only=True),
    Validation("gpu-readiness-probe", probes.readiness_probe, gpu_only=True),
    Validation("gpu-init-container", resources.init_container_gpu, gpu_only=True),
    # A KServe predictor whose runtime's /dev/shm cannot be told gets none: say what to set.
    Validation("gpu-shm", shm.runtime_shm_unknown, gpu_only=True),
    Validation("gpu-quota", quota.gpu_quota, gpu_only=True, needs_cluster=True),
    Validation(
        "gpu-priority-class",
        priority.gpu_priority_class,
        gpu_only=True,
        needs_cluster=True,
        offline_part=True,
    ),
    Validation("gpu-schedulable", schedulable.gpu_schedulable, gpu_only=True, needs_cluster=True),
    Validation("gpu-queue", queue.gpu_queue, gpu_only=True, needs_cluster=True),
    Validation("gpu-spend", spend.gpu_spend, gpu_only=True),
)


ISOLATION_RULES = isolation.ISOLATION_RULES

# The rules that judge what a workload takes of the namespace's GPUs now: a suspended object
# released by an update is judged by these alone for the templates the update left as they were.
BUDGET_RULES = frozenset({"gpu-quota"})

# Rules that judge nothing without cluster facts; audits list them as not checked.
CLUSTER_RULES: tuple[str, ...] = tuple(v.rule for v in VALIDATIONS if v.needs_cluster)
