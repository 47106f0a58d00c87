"""Objects the webhook does not change or judge, in whole or in part: the built-in exemptions
(`components`), the lists a rule set adds, and the built-in ones it removes. What each kind
relaxes follows from who can claim it (`relaxing`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from webhook.modelerrors import Invalid
from webhook.namepatterns import is_pattern
from webhook.ruleset.base import StrictModel
from webhook.ruleset.components import CLUSTER_NAMESPACES, COMPONENTS, Component
from webhook.ruleset.defaults import DEFAULT_EXEMPT_NAMESPACES
from webhook.selectors import LabelSelector

__all__ = ["ExemptionRemovals", "Exemptions", "WorkloadExemption"]


class WorkloadExemption(StrictModel):
    """A DaemonSet whose pods need GPU access (a device plugin, a GPU monitor), by name.

    Its pod template, and each pod its controller creates (the pod's controller reference
    names it and the request comes from the Kubernetes DaemonSet controller, which no tenant
    can be), are exempt from the GPU-access rules only: never from budgets, ResourceQuotas,
    priority or schedulability. It trusts whoever may create or update
    DaemonSets in that namespace: a pod naming the DaemonSet, its labels or its account is not
    enough.
    """

    kind: Literal["DaemonSet"] = Field(description="The workload's kind: DaemonSet.")
    namespace: str = Field(description="The DaemonSet's namespace, exactly (no pattern).")
    name: str = Field(description="The DaemonSet's name (patterns allowed).")

    @field_validator("namespace")
    @classmethod
    def _exact(cls, value: str) -> str:
        if is_pattern(value) or not value:
            raise Invalid(
                f"{value!r}: the namespace must be one name",
                "write the DaemonSet's namespace exactly: a pattern could match a namespace a "
                "tenant creates",
            )
        return value


class ExemptionRemovals(StrictModel):
    """Built-in exemptions to take away: the one way to narrow them, since the lists in
    `exemptions` add to the built-in ones."""

    namespaces: list[str] = Field(
        default_factory=list,
        description="Built-in exempt namespaces that are to be judged after all.",
    )

    @field_validator("namespaces")
    @classmethod
    def _built_in(cls, value: list[str]) -> list[str]:
        unknown = [i for i, n in enumerate(value) if n not in DEFAULT_EXEMPT_NAMESPACES]
        if unknown:
            raise Invalid(
                f"{', '.join(value[i] for i in unknown)}: not a built-in exempt namespace; the "
                f"built-in ones are {', '.join(DEFAULT_EXEMPT_NAMESPACES)}",
                "list only built-in ones here; to stop exempting a namespace you added, delete "
                "it from exemptions.namespaces",
                (unknown[0],),
            )
        return value


class Exemptions(StrictModel):
    """Objects the webhook does not change or judge, in whole or in part.

    The lists add to the built-in exemptions (`components`): a team file that exempts its own
    namespace must not silently un-exempt the GPU Operator. Removing a built-in one takes
    `remove`, by name, or `builtIn: false` for all of them.
    """

    namespaces: list[str] = Field(
        default_factory=list,
        description=(
            "Namespaces where nothing is changed or judged, besides the built-in exemptions "
            "(patterns allowed). List only namespaces no tenant can create or run pods in."
        ),
    )
    remove: ExemptionRemovals = Field(default_factory=ExemptionRemovals)
    built_in: bool = Field(
        default=True,
        description=(
            "The built-in exemptions: kube-system, kube-public and kube-node-lease whole, and "
            "in the namespaces GPU components install in, the GPU-access rules for the "
            "components' own pods (their service accounts, or their DaemonSets' pods). false "
            "turns them all off: for clusters where tenants may create namespaces, with the "
            "components exempted by exemptions.workloads."
        ),
    )
    workloads: list[WorkloadExemption] = Field(
        default_factory=list,
        description=(
            "DaemonSets whose pods need GPU access: their template and the pods the DaemonSet "
            "controller creates for them are exempt from the GPU-access rules only, never from "
            "budgets, quotas, priority or schedulability."
        ),
    )
    # Needs namespace labels: known with a cluster snapshot or the live cache.
    namespace_selector: LabelSelector | None = None
    # Labels of the pod (or of the controller's pod template). The pod's author sets them, so
    # they relax only the rules about the pod's own shape and hygiene (`relaxing.BY_LABEL`).
    pod_selector: LabelSelector | None = Field(
        default=None,
        description=(
            "Labels of the pod (or of the controller's pod template). Relaxes only the rules "
            "about the pod's own shape and hygiene (requests and limits, whole quantities, MIG "
            "mixing, memory limit, readiness probe, init containers, /dev/shm, tolerations, "
            "probe delays): a pod's author sets its labels, so GPU access, budgets, "
            "ResourceQuotas, priority and schedulability are judged as for any pod."
        ),
    )
    # "namespace/name" of the pod's spec.serviceAccountName; patterns allowed ("gpu-*/ *").
    service_accounts: list[str] = Field(default_factory=list)

    @property
    def all_namespaces(self) -> list[str]:
        """Every namespace exempt whole: the built-in ones every cluster has (less those
        removed), then the added ones."""
        gone = set(self.remove.namespaces)
        names = [*(CLUSTER_NAMESPACES if self.built_in else ()), *self.namespaces]
        return [n for n in dict.fromkeys(names) if n not in gone]

    @property
    def components(self) -> list[Component]:
        """The built-in component exemptions in force, each in the namespaces not removed."""
        if not self.built_in:
            return []
        gone = set(self.remove.namespaces)
        out = []
        for c in COMPONENTS:
            kept = tuple(n for n in c.namespaces if n not in gone)
            if kept and (c.accounts or c.daemonsets):
                out.append(Component(c.name, kept, c.accounts, c.daemonsets))
        return out

    @field_validator("service_accounts")
    @classmethod
    def _namespaced(cls, value: list[str]) -> list[str]:
        for i, entry in enumerate(value):
            if entry.count("/") != 1 or "" in entry.split("/"):
                raise Invalid(
                    f"{entry!r} must be namespace/name",
                    "write the service account's namespace and name, e.g. gpu-operator/dcgm",
                    (i,),
                )
        return value
