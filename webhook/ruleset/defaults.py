"""The built-in defaults that are lists of names, kept apart from the models that use them:
the GPU resource names, the namespaces of the built-in exemptions (`components` says what is
exempt in each) and where Cluster API objects are read. The host paths that reach GPUs are in
`hostpaths`."""

from __future__ import annotations

from webhook.ruleset.components import CLUSTER_NAMESPACES, COMPONENTS

__all__ = ["DEFAULT_EXEMPT_NAMESPACES", "DEFAULT_GPU_RESOURCES", "DEFAULT_PROVISIONING_NAMESPACES"]

DEFAULT_GPU_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/mig-*",
    "amd.com/gpu",
    "gpu.intel.com/*",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "*.shared",
]

# Every namespace a built-in exemption is about (`components`): those every cluster has, exempt
# whole, and those GPU components install in, where only the component's own pods are.
DEFAULT_EXEMPT_NAMESPACES = [*CLUSTER_NAMESPACES, *(n for c in COMPONENTS for n in c.namespaces)]

# Where Cluster API node groups (MachineSets, MachineDeployments, MachinePools) are read from:
# what the cluster can create is a cluster-wide fact, so it comes only from namespaces tenants
# cannot write. `default` is where `clusterctl` puts a cluster's objects unless told otherwise
# (and where they stay after `clusterctl move` into the cluster itself); kube-system is never a
# tenant's. Exact names, no patterns: a tenant could create a namespace a pattern matches.
# Karpenter's NodePools are cluster-scoped, read always.
DEFAULT_PROVISIONING_NAMESPACES = ["default", "kube-system"]
