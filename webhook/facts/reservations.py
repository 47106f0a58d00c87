"""GPUs held for pods this replica admitted but the watch has not shown yet.

Without holds, two creates racing for the last GPUs of a budget both pass. A hold ends when the
watch reports the pod (`release_for`); when a current watch has had `settle` seconds to show it
and did not (the create was refused further down the admission chain, or the review was never
followed by one: forged); or after `ttl` seconds whatever the watch (`expire`, called by a timer
and before each read). Both are at least as long as the slowest validating webhook on pods may
keep a create waiting, when the source of facts knows it (`webhookconfigs`). Drivers never
take one for a dryRun request. Holds live in one replica: see the docs for the race across
replicas.

Anyone who can reach the Service can post a review that looks admitted, so the holds are
bounded as if every sender were hostile: one hold per (namespace, pod name) — a repeated review
replaces it, never stacks —, none longer than `ttl`, at most `max_holds` in all and
`max_per_namespace` in one namespace (the oldest goes first), and none for a pod whose names
or resource lists no apiserver would accept. Reads cost O(1) in the number of holds: each
namespace keeps a running total, updated as holds come and go.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from webhook.facts.holdtimes import HOLD_SECONDS
from webhook.facts.model import Facts, FactsSource, NodeIndex, PodGpus, Quota, Usage, Usages
from webhook.facts.webhookconfigs import SETTLE_MARGIN
from webhook.quantity import Amount

__all__ = ["Reservations", "ReservingFacts"]

_Key = tuple[str, str]  # (namespace, pod name)
K = TypeVar("K")

# What a pod the apiserver accepts can carry: DNS label / subdomain lengths, and far more
# GPU resource names and products than any real pod asks for.
_MAX_NAMESPACE = 63
_MAX_NAME = 253
_MAX_RESOURCES = 16
_MAX_PRODUCTS = 64
_MAX_LABEL_VALUE = 63  # a product is a node label value
_RECENT = 20  # unmatched holds named in one log line


# Both built on every hold taken: compiled values ("Compiled values", docs/development.md).
@dataclass(slots=True, init=False)
class _Hold:
    pod: PodGpus
    taken: float  # when: it ends `ttl` later whatever the watch says, or `settle` later
    # once a current watch has had the time to show the pod (both read when it is due)

    def __init__(self, pod: PodGpus, taken: float) -> None:
        self.pod = pod
        self.taken = taken


@dataclass(slots=True, init=False)
class _Namespace:
    """One namespace's holds by pod name, oldest first (a dict keeps insertion order), and
    their running total: one small record per namespace, as most hold a pod or two."""

    holds: dict[str, _Hold]
    total: Usage

    def __init__(self, holds: dict[str, _Hold], total: Usage) -> None:
        self.holds = holds
        self.total = total


def _shift(table: dict[K, Any], key: K, delta: Amount) -> None:
    left = table.get(key, 0) + delta
    if left:
        table[key] = left
    else:  # gone, not zero: a busy namespace's total never grows with names no hold uses
        table.pop(key, None)


def _charge(total: Usage, pod: PodGpus, sign: int) -> None:
    """Add (or take away) one pod in a running total."""
    products = pod.products
    for name, amount in pod.gpus.items():
        _shift(total.by_resource, name, sign * amount)
        for product in products:
            _shift(total.by_product, (name, product), sign * amount)


def _acceptable(pod: PodGpus) -> bool:
    """Whether a real pod create could look like this; anything else holds nothing."""
    return (
        len(pod.namespace) <= _MAX_NAMESPACE
        and len(pod.name) <= _MAX_NAME
        and len(pod.gpus) <= _MAX_RESOURCES
        and all(len(name) <= _MAX_NAME + 64 for name in pod.gpus)  # prefix/name
        and len(pod.products) <= _MAX_PRODUCTS
        and all(len(product) <= _MAX_LABEL_VALUE for product in pod.products)
    )


class Reservations:
    """The holds of one replica, in expiry order, with a GPU total per namespace.

    Every hold lives the same `ttl`, so insertion order is expiry order and `expire` only
    ever looks at the front. The watch thread releases while the event loop holds and reads:
    one lock, held for O(1) work each time (O(expired) for `expire`).
    """

    def __init__(
        self,
        ttl: float = HOLD_SECONDS,
        max_holds: int = 10_000,
        max_per_namespace: int | None = None,
        *,
        settle: float | None = None,
    ) -> None:
        self.ttl = ttl
        # How long a real create can take from this replica's answer to the watch showing the
        # pod (the rest of the admission chain, the write, the watch's delivery). Only read
        # while `watching()` says a watch of pods is current; without one `ttl` is the end.
        # The least of it: `chain` may make it longer.
        self.settle = ttl if settle is None else min(settle, ttl)
        # Set from the source of facts: the longest `timeoutSeconds` of the validating
        # webhooks on pods (`webhookconfigs`); None from it: not known. The settle time is at
        # least that plus SETTLE_MARGIN, and the hold period at least the settle time: a hold
        # must outlast the chain that may still store its pod.
        self.chain: Callable[[], float | None] | None = None
        # Set by the live cache: whether its pods watch is current. None (a snapshot): no
        # watch will ever show a pod, so a hold's end says nothing about it.
        self.watching: Callable[[], bool] | None = None
        self.unmatched = 0  # holds that ended without the watch showing their pod (a metric)
        self._recent_unmatched: list[_Key] = []  # for the log line, at most _RECENT kept
        self.max_holds = max(1, max_holds)
        # A tenth of all holds by default: one namespace cannot evict everyone else's.
        self.max_per_namespace = max(1, max_per_namespace or self.max_holds // 10)
        self.dropped = 0  # holds evicted early by a cap (a metric for the server to export)
        self._lock = threading.Lock()
        self._order: OrderedDict[_Key, _Hold] = OrderedDict()
        self._namespaces: dict[str, _Namespace] = {}

    @property
    def count(self) -> int:
        """Holds in force (not `__len__`: an empty Reservations must not test false)."""
        return len(self._order)

    def hold(self, pod: PodGpus, *, now: float | None = None) -> None:
        """Hold `pod`'s GPUs (for `ttl` seconds at most), replacing any hold of the same pod
        name."""
        if self.ttl <= 0 or not pod.gpus or not _acceptable(pod):
            return
        taken = time.monotonic() if now is None else now
        namespace = pod.namespace
        key = (namespace, pod.name)
        with self._lock:
            self._drop(key)
            ns = self._namespaces.get(namespace)
            if ns is not None and len(ns.holds) >= self.max_per_namespace:
                self._drop((namespace, next(iter(ns.holds))))
                self.dropped += 1
            if len(self._order) >= self.max_holds:
                self._drop(next(iter(self._order)))
                self.dropped += 1
            entry = _Hold(pod, taken)
            self._order[key] = entry
            ns = self._namespaces.get(namespace)  # it may have gone with its last hold above
            if ns is None:
                ns = self._namespaces[namespace] = _Namespace({}, Usage({}, {}))
            ns.holds[pod.name] = entry
            _charge(ns.total, pod, 1)

    def release_for(self, seen: PodGpus) -> None:
        """The watch showed `seen`: drop the hold it accounts for.

        Validating admission sees the final name, so the name alone decides. A hold taken
        under a generateName prefix (`train-`) matches a pod whose name starts with it and
        asks for the same GPUs: one lookup per "-" in the name, never a walk over holds.
        """
        if seen.namespace not in self._namespaces:
            return
        with self._lock:
            key = (seen.namespace, seen.name)
            if key in self._order:
                self._drop(key)
                return
            for i, ch in enumerate(seen.name[:-1]):
                if ch != "-":
                    continue
                key = (seen.namespace, seen.name[: i + 1])
                entry = self._order.get(key)
                if entry is not None and entry.pod.gpus == seen.gpus:
                    self._drop(key)
                    return

    def release_listed(self, pods: Iterable[PodGpus]) -> None:
        """A relist showed `pods`: drop the holds they account for (a pod created while the
        watch was down arrives in the list, never as an event)."""
        for pod in pods:
            if pod.namespace in self._namespaces:
                self.release_for(pod)

    def periods(self) -> tuple[float, float]:
        """(settle time, hold period) now: at least the flags', and long enough for the
        slowest validating webhook on pods when it is known."""
        settle = self.settle
        chain = self.chain
        wait = chain() if chain is not None else None
        if wait is not None and wait + SETTLE_MARGIN > settle:
            settle = wait + SETTLE_MARGIN
        return settle, max(self.ttl, settle)

    def expire(self, now: float | None = None) -> int:
        """Drop every hold whose time is up; how many went. Amortised O(1) per hold.

        Every hold is judged by the same settle time and period (`periods`, read once per
        call), so the oldest is always the first due. With a watch, each one that goes here
        ended unmatched: it never showed the pod."""
        now = time.monotonic() if now is None else now
        if not self._order:
            return 0
        watching = self.watching
        current = watching is not None and watching()
        settle, ttl = self.periods()
        dropped = 0
        with self._lock:
            while self._order:
                key, entry = next(iter(self._order.items()))
                if entry.taken + ttl > now and (not current or entry.taken + settle > now):
                    break
                self._drop(key)
                dropped += 1
                if watching is not None and len(self._recent_unmatched) < _RECENT:
                    self._recent_unmatched.append(key)
            if watching is not None:
                self.unmatched += dropped
        return dropped

    def take_unmatched(self) -> list[tuple[str, str]]:
        """(namespace, pod name) of holds that ended unmatched since the last call, at most
        a few dozen (the count is `unmatched`): what the periodic log line names."""
        with self._lock:
            recent, self._recent_unmatched = self._recent_unmatched, []
        return recent

    def namespaces(self) -> list[str]:
        """The namespaces with a hold right now (a copy, in no order)."""
        with self._lock:
            return list(self._namespaces)

    def usage(self, namespace: str) -> Usage | None:
        """The GPUs held in `namespace` right now (a copy), or None when nothing is."""
        if namespace not in self._namespaces:  # the common case, without the lock
            return None
        with self._lock:
            ns = self._namespaces.get(namespace)
            if ns is None:
                return None
            return Usage(dict(ns.total.by_resource), dict(ns.total.by_product))

    def added_to(
        self, usage: Usage, namespace: str, quotas: tuple[Quota, ...] = ()
    ) -> tuple[Usage, Usage | None]:
        """`usage` with this namespace's holds added (a new value, `usage` stays as it was),
        and the holds left out of it: those of a resource one of the namespace's `quotas` caps
        (`natively_capped`), which the apiserver counts exactly. A budget tighter than such a
        quota adds them back (`Facts.unheld`).

        Work is the size of the two totals, never the number of holds.
        """
        if namespace not in self._namespaces:
            return usage, None
        native = natively_capped(quotas)
        with self._lock:
            ns = self._namespaces.get(namespace)
            if ns is None:
                return usage, None
            held = ns.total
            out = Usage()
            out.by_resource.update(usage.by_resource)
            out.by_product.update(usage.by_product)
            unheld: Usage | None = None
            for name, amount in held.by_resource.items():
                if name not in native:
                    out.by_resource[name] += amount
                else:
                    unheld = unheld or Usage()
                    unheld.by_resource[name] += amount
            for key, amount in held.by_product.items():
                out.by_product[key] += amount
            return out, unheld

    def held(self, namespace: str, now: float | None = None) -> list[PodGpus]:
        """The pods held in `namespace`, oldest first (for tests and debugging: O(holds))."""
        now = time.monotonic() if now is None else now
        ttl = self.periods()[1]
        with self._lock:
            ns = self._namespaces.get(namespace)
            return [h.pod for h in ns.holds.values() if h.taken + ttl > now] if ns else []

    def _drop(self, key: _Key) -> None:
        """Forget one hold everywhere; the caller holds the lock."""
        entry = self._order.pop(key, None)
        if entry is None:
            return
        namespace, name = key
        ns = self._namespaces[namespace]
        del ns.holds[name]
        if ns.holds:
            _charge(ns.total, entry.pod, -1)
        else:  # the last one: forget the namespace altogether
            del self._namespaces[namespace]


class ReservingFacts:
    """A source whose facts count this replica's holds in each namespace's usage, and in what
    a budget over several namespaces reads of the others (`Facts.usages`)."""

    def __init__(self, base: FactsSource, reservations: Reservations) -> None:
        self.base = base
        self.reservations = reservations
        # How long the base says the admission chain may keep a create waiting (the live
        # cache and a snapshot know it): the holds settle no sooner.
        chain = getattr(base, "webhook_seconds", None)
        if chain is not None:
            reservations.chain = chain
        # The base's view of every namespace and the same with the holds, made once: a source
        # hands out the same view with every Facts.
        self._usages: tuple[Usages | None, Usages | None] = (None, None)

    def node_index(self) -> NodeIndex:
        return self.base.node_index()

    def served_names(self) -> frozenset[str]:
        return self.base.served_names()

    def facts_for(self, namespace: str) -> Facts:
        facts = self.base.facts_for(namespace)
        holds = self.reservations
        holds.expire()  # amortised O(1); exact even where no timer runs (tests, the CLI)
        usage, unheld = holds.added_to(facts.usage, namespace, facts.quotas)
        if not holds.count or facts.usages is None:
            return facts if usage is facts.usage else facts.with_usage(usage, unheld)
        return facts.with_usage(usage, unheld, self._held(facts.usages))

    def _held(self, usages: Usages) -> Usages:
        """`usages` counting the holds: made when the base hands out a new view."""
        base, held = self._usages
        if base is not usages or held is None:
            held = usages.with_holds(self.reservations)
            self._usages = (usages, held)
        return held


_DRA_QUOTA_SUFFIX = ".deviceclass.resource.k8s.io/devices"


def natively_capped(quotas: tuple[Quota, ...]) -> frozenset[str]:
    """The resources a ResourceQuota of the namespace caps: `requests.<name>` (a `limits.`
    entry is never enforced for extended resources) and DRA device-class keys. The apiserver's
    quota admission counts them transactionally across every replica and cannot be forged, so
    a hold adds nothing there: a forged review must never make a real pod's budget look full.
    Per-product caps are no resource a quota can name; their holds still count. A scoped
    quota counts only the pods its scopes match: it keeps no budget, so holds count beside
    it."""
    if not quotas:
        return frozenset()
    names = set()
    for quota in quotas:
        if quota.scopes:
            continue
        for key in quota.hard:
            if key.startswith("requests."):
                names.add(key[len("requests.") :])
            elif key.endswith(_DRA_QUOTA_SUFFIX):
                names.add(key)
    return frozenset(names)
