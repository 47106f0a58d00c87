"""A pod's effective request, by Kubernetes' own formula (KEP-753, sidecar containers).

Regular containers run together; ordinary init containers run one at a time, each beside the
sidecars (init containers with `restartPolicy: Always`) started before it; sidecars keep
running beside the regular containers. The scheduler, ResourceQuota and the kubelet all count
this way, so every place that counts a pod's GPUs (admission, the live cache) uses this one
function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction

__all__ = ["effective_request", "is_sidecar"]


def is_sidecar(container: Mapping[str, object]) -> bool:
    """An init container that keeps running beside the regular ones."""
    return container.get("restartPolicy") == "Always"


def effective_request(
    regular: Iterable[Mapping[str, Fraction]],
    init: Iterable[tuple[Mapping[str, Fraction], bool]],
) -> dict[str, Fraction]:
    """max(sum(regular) + sum(sidecars), the peak while init containers run), per resource.

    `init` is every init container in order, with whether it is a sidecar.
    """
    running: dict[str, Fraction] = {}  # sidecars started so far
    peak: dict[str, Fraction] = {}
    for asks, sidecar in init:
        if sidecar:
            for name, amount in asks.items():
                running[name] = running.get(name, Fraction(0)) + amount
            step = running
        else:
            step = {
                n: running.get(n, Fraction(0)) + asks.get(n, Fraction(0)) for n in {*running, *asks}
            }
        for name, amount in step.items():
            if amount > peak.get(name, Fraction(0)):
                peak[name] = amount
    total = dict(running)
    for asks in regular:
        for name, amount in asks.items():
            total[name] = total.get(name, Fraction(0)) + amount
    out = {n: max(total.get(n, Fraction(0)), peak.get(n, Fraction(0))) for n in {*total, *peak}}
    return {n: v for n, v in out.items() if v > 0}
