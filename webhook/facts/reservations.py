"""GPUs held for pods this replica admitted but the watch has not shown yet.

Without holds, two creates racing for the last GPUs of a budget both pass. A hold ends when the
watch reports a matching pod (`release_for`) or after `ttl` seconds. Drivers never take one
for a dryRun request. Holds live in one replica: see the README for the race across replicas.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace

from webhook.facts.model import Facts, FactsSource, PodGpus

__all__ = ["Reservations", "ReservingFacts"]


class Reservations:
    """Holds per namespace, oldest first; every hold lives the same `ttl`, so expiry only ever
    looks at the front of a namespace's queue."""

    def __init__(self, ttl: float = 30.0) -> None:
        self.ttl = ttl
        self._held: dict[str, deque[tuple[float, PodGpus]]] = {}

    def hold(self, pod: PodGpus, *, now: float | None = None) -> None:
        until = (time.monotonic() if now is None else now) + self.ttl
        self._held.setdefault(pod.namespace, deque()).append((until, pod))

    def release_for(self, seen: PodGpus) -> None:
        """The watch showed `seen`: drop the oldest hold it accounts for.

        Admission may see a pod before it has a name (generateName), so a hold matches by
        exact name or by name prefix, and by the same GPUs.
        """
        holds = self._held.get(seen.namespace)
        if not holds:
            return
        for i, (_, pod) in enumerate(holds):
            if pod.gpus == seen.gpus and (
                pod.name == seen.name or (pod.name.endswith("-") and seen.name.startswith(pod.name))
            ):
                del holds[i]
                break
        if not holds:
            del self._held[seen.namespace]

    def held(self, namespace: str, now: float | None = None) -> list[PodGpus]:
        holds = self._held.get(namespace)
        if not holds:
            return []
        now = time.monotonic() if now is None else now
        while holds and holds[0][0] <= now:
            holds.popleft()
        if not holds:
            del self._held[namespace]
            return []
        return [pod for _, pod in holds]


class ReservingFacts:
    """A source whose facts count this replica's holds in each namespace's usage."""

    def __init__(self, base: FactsSource, reservations: Reservations) -> None:
        self.base = base
        self.reservations = reservations

    def facts_for(self, namespace: str) -> Facts:
        facts = self.base.facts_for(namespace)
        held = self.reservations.held(namespace)
        return replace(facts, usage=facts.usage.plus(held)) if held else facts
