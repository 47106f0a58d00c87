"""What a controller's pods ask all at once: each template's pods x its GPUs, summed.

Quota advice for a Deployment, a PyTorchJob or a JobSet reads these totals, never one template
at a time: a 4-GPU master and three 8-GPU workers ask 28 GPUs together, and a budget of 8
holds none of the workers. The audit's "asked" bars sum the same way. Data only (the sums
are `accounting.object_totals`), so the context that carries them imports nothing back.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.quantity import Amount, show

__all__ = ["Part", "Totals", "template_name"]


def template_name(field_path: str) -> str:
    """Where a user finds a template: `spec.pytorchReplicaSpecs.Worker`, not the pod spec's
    `spec.pytorchReplicaSpecs.Worker.template.spec`."""
    name = field_path
    for suffix in (".spec", ".template", ".spec", ".template"):
        name = name.removesuffix(suffix)
    return name or field_path


@dataclass(frozen=True, slots=True)
class Part:
    """One template's share: `pods` pods asking `per_pod` each."""

    where: str
    pods: int
    per_pod: dict[str, Amount]


@dataclass(frozen=True, slots=True)
class Totals:
    """An object's GPU asks, all its pods at once. Object-wide findings go on the `lead`
    template (the first that asks for GPUs), so each is said once."""

    lead: str  # JSON pointer of the lead pod view
    gpus: dict[str, Amount]
    parts: tuple[Part, ...]
    gang: bool  # every pod runs together or none does (the workload table's `gang`)
    # What ResourceQuota counts of `gpus`: without the shares sharing schedulers give by
    # annotation and with HAMi's per-GPU units once per container (None: the same as `gpus`).
    counted: dict[str, Amount] | None = None

    @property
    def quota_gpus(self) -> dict[str, Amount]:
        """The totals as ResourceQuota counts them."""
        return self.gpus if self.counted is None else self.counted

    def asked(self, name: str) -> str:
        """How the total of `name` is made, as a message says it: `1 pod x 4
        (spec.pytorchReplicaSpecs.Master) + 3 pods x 8 (spec.pytorchReplicaSpecs.Worker) =
        28`; one template reads as before: `3 pods x 4 = 12`, `this pod asks 4`."""
        parts = [p for p in self.parts if p.per_pod.get(name, 0) > 0]
        total = show(self.gpus.get(name, 0))
        if len(parts) == 1:
            one = parts[0]
            if one.pods == 1:
                return f"this pod asks {total}"
            return f"{one.pods} pods x {show(one.per_pod[name])} = {total}"
        terms = " + ".join(
            f"{p.pods} pod{'s' if p.pods != 1 else ''} x {show(p.per_pod[name])} ({p.where})"
            for p in parts
        )
        return f"{terms} = {total}"
