"""Objects the webhook never changes or judges: the built-in exempt namespaces (where GPU
components install by their own docs), the lists a rule set adds, and the ones it removes."""

from __future__ import annotations

from pydantic import Field, field_validator

from webhook.modelerrors import Invalid
from webhook.ruleset.base import StrictModel
from webhook.ruleset.defaults import DEFAULT_EXEMPT_NAMESPACES
from webhook.selectors import LabelSelector

__all__ = ["ExemptionRemovals", "Exemptions"]


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
    """Objects the webhook never changes or judges. Any one match exempts.

    The lists add to the built-in exemptions (where GPU components install by their own docs):
    a team file that exempts its own namespace must not silently un-exempt the GPU Operator.
    Removing a built-in one takes `remove`, by name.
    """

    namespaces: list[str] = Field(
        default_factory=list,
        description=(
            "Namespaces exempt besides the built-in ones (patterns allowed); the built-in ones "
            "stay unless listed in exemptions.remove.namespaces."
        ),
    )
    remove: ExemptionRemovals = Field(default_factory=ExemptionRemovals)
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
        """Every exempt namespace: the built-in ones less those removed, then the added ones."""
        gone = set(self.remove.namespaces)
        names = [*DEFAULT_EXEMPT_NAMESPACES, *self.namespaces]
        return [n for n in dict.fromkeys(names) if n not in gone]

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
