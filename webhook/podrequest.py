"""A pod's effective request, by Kubernetes' own formula (KEP-753, sidecar containers).

Regular containers run together; ordinary init containers run one at a time, each beside the
sidecars (init containers with `restartPolicy: Always`) started before it; sidecars keep
running beside the regular containers. The scheduler, ResourceQuota and the kubelet all count
this way, so every place that counts a pod's GPUs (admission, the live cache) uses this one
function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from webhook.quantity import Amount

__all__ = ["effective_request", "is_sidecar"]


def is_sidecar(container: Mapping[str, object]) -> bool:
    """An init container that keeps running beside the regular ones."""
    return container.get("restartPolicy") == "Always"


def effective_request(
    regular: Iterable[Mapping[str, Amount]],
    init: Iterable[tuple[Mapping[str, Amount], bool]],
) -> dict[str, Amount]:
    """max(sum(regular) + sum(sidecars), the peak while init containers run), per resource.

    `init` is every init container in order, with whether it is a sidecar.
    """
    running: dict[str, Amount] = {}  # sidecars started so far
    peak: dict[str, Amount] = {}
    for asks, sidecar in init:
        if sidecar:
            for name, amount in asks.items():
                running[name] = running[name] + amount if name in running else amount
            step = running
        else:
            step = dict(running)
            for name, amount in asks.items():
                step[name] = step[name] + amount if name in step else amount
        for name, amount in step.items():
            if name not in peak or amount > peak[name]:
                peak[name] = amount
    total = dict(running)
    for asks in regular:
        for name, amount in asks.items():
            total[name] = total[name] + amount if name in total else amount
    for name, amount in peak.items():
        if name not in total or amount > total[name]:
            total[name] = amount
    # The numerator's sign, not `v > 0`: a Fraction compares in pure Python (quantity.positive).
    return {n: v for n, v in total.items() if v.numerator > 0}
