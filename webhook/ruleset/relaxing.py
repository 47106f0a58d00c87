"""What each kind of exemption relaxes, by who can claim it.

An exemption is only as strong as the grant behind it. A pod's labels are its author's to
set, so a label exemption relaxes only the rules whose breach costs that author alone (the
pod's own shape and hygiene). The GPU-access rules protect the other tenants on a node: only
grants a tenant cannot make relax them (a built-in component's own service accounts, a
DaemonSet the platform team names, its pods as its controller makes them). Budgets,
ResourceQuotas, priority classes, schedulability and squatting on GPU nodes protect
everyone's share: only a whole exempt namespace (or service account) the platform team lists
skips them.
"""

from __future__ import annotations

__all__ = [
    "BY_COMPONENT",
    "BY_LABEL",
    "ISOLATION_RULES",
    "OWN_RULES",
    "SHARED_RULES",
    "describe",
]

# The GPU-access rules (the visible-devices mutation, which hides GPUs, included).
ISOLATION_RULES: tuple[str, ...] = ("visible-devices", "privileged-gpu", "host-gpu-devices")
# What every tenant's share depends on.
SHARED_RULES: tuple[str, ...] = (
    "gpu-quota",
    "gpu-priority-class",
    "gpu-schedulable",
    "gpu-queue",
    "gpu-toleration-without-gpu",
    "gpu-spend",
)
# The pod's own shape and hygiene: broken, they cost only the pod's author (the apiserver or
# the scheduler refuses the pod, or it runs worse), and their mutations only help it.
OWN_RULES: tuple[str, ...] = (
    "gpu-requests-limits",
    "gpu-whole-quantity",
    "gpu-mig-mixed",
    "gpu-memory-limit",
    "gpu-readiness-probe",
    "gpu-init-container",
    "gpu-shm",
    "gpu-tolerations",
    "gpu-probe-delays",
)

# exemptions.podSelector: the pod's author chose the labels.
BY_LABEL: frozenset[str] = frozenset(OWN_RULES)
# A built-in component's own pods and exemptions.workloads: what a device plugin or node agent
# needs, GPU access, and nothing else (the native policies judge the other rules the same way).
BY_COMPONENT: frozenset[str] = frozenset(ISOLATION_RULES)


def describe(rules: frozenset[str]) -> str:
    """The rules a partial exemption relaxes, in catalogue order, for `rules check`."""
    order = (*ISOLATION_RULES, *SHARED_RULES, *OWN_RULES)
    return ", ".join(r for r in order if r in rules)
