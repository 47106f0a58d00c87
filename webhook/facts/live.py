"""The webhook's live cluster facts: list+watch through the `kubernetes` client, kept compact.

One thread per resource kind (a row of `watched.WATCHED`: its list call, its reducer, its
store in `webhook.facts.stores`) runs the informer loop the API server expects: a paged list
(`limit`/`continue`) gives a resourceVersion; a watch from there (with bookmarks) applies
events; a watch that ends is resumed from the last resourceVersion seen; `410 Gone` means the
history is compacted, so the kind is listed again; any other failure backs off exponentially
and relists. Pods are reduced to `PodGpus` as they arrive (non-GPU pods are not kept), and
per-namespace usage is updated incrementally, so reads are dict lookups at any cluster size.

ConfigMaps are watched for one thing: the keys `envFrom` could turn into
NVIDIA_VISIBLE_DEVICES, and a GPU-sharing scheduler's device keys. Only those keys are kept,
and only for the ConfigMaps that have one, so thousands of ConfigMaps cost next to nothing.
Secrets are not watched: a cluster-wide list/watch grant on Secrets is one most security teams
refuse, so `Facts.secrets` stays None (unknown) and the isolation rules judge an `envFrom` of a
Secret as possibly `all`.

The autoscalers' objects (Karpenter NodePools, Cluster API MachineSets and MachineDeployments)
are watched the same way when their CRDs are installed, and kept only as the GPU node shapes
they can create (`webhook.facts.provisioning`). They are optional: a 404 on a list means the
CRD is not installed (the kind holds nothing; listed again every `recheck_seconds` in case it
comes), a 403 means we may not read it (provisioning unknown, warned). Neither holds up
`synced`, and the facts say provisioning is known only once every installed kind is listed.

DRA's DeviceClasses, ResourceClaimTemplates and ResourceClaims (`resource.k8s.io/v1`) are
optional the same way (404: DRA not served, known empty; 403: unknown) and kept as
`webhook.facts.dra` reduces them. A claim made for a pod from a template ends that pod's
hold: from then on the claim itself counts.

Kueue's and KAI's queues are optional the same way (`webhook.facts.queues`), and so are
KServe's ServingRuntimes and ClusterServingRuntimes (`serving.kserve.io/v1alpha1`) (404:
KServe not installed, known empty; 403: unknown), kept as `webhook.facts.servingruntimes`
reduces them: which runtime an InferenceService predictor uses, and whether it brings /dev/shm.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import orjson

from webhook.facts.client import list_call
from webhook.facts.dra import DraCache
from webhook.facts.model import Facts, NodeIndex
from webhook.facts.queues import QueueStore
from webhook.facts.relist import reduced
from webhook.facts.reservations import Reservations
from webhook.facts.servingruntimes import RuntimeStore
from webhook.facts.stores import ProvisioningStore, Stores
from webhook.facts.watched import (
    DRA_KINDS,
    KINDS,
    PROVISIONING_KINDS,
    SERVING_KINDS,
    WATCHED,
    Watched,
    describe,
    lines_until_cut,
    pages,
)
from webhook.facts.webhookconfigs import WebhookTimeouts

__all__ = ["DRA_KINDS", "KINDS", "PROVISIONING_KINDS", "SERVING_KINDS", "LiveCache", "pages"]

log = logging.getLogger("gpu-admission.cache")

# The kinds `synced` and `age_seconds` are about: the core ones every cluster serves.
_CORE = tuple(name for name, row in WATCHED.items() if not row.optional)


class Gone(Exception):
    """The watch's resourceVersion is older than the server keeps: relist."""


class LiveCache:
    """Implements `ClusterFacts` from list+watch. Reads never block on the network."""

    def __init__(
        self,
        api_client: Any,
        *,
        reservations: Reservations | None = None,
        page_size: int = 500,
        watch_timeout: int = 60,
        max_backoff: float = 30.0,
        on_relist: Callable[[str], None] | None = None,
        recheck_seconds: float = 300.0,
    ) -> None:
        self.api_client = api_client
        self.reservations = reservations
        if reservations is not None:
            reservations.watching = self.pods_current
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self.recheck_seconds = recheck_seconds  # how often an absent CRD is looked for again
        # Every kind's store (`webhook.facts.stores`); a pod the watch shows ends its hold.
        self.stores = Stores(
            holds=reservations,
            provisioning=ProvisioningStore(tuple(k.name for k in PROVISIONING_KINDS)),
            dra=DraCache(),
            runtimes=RuntimeStore(),
            webhooks=WebhookTimeouts(),
            queues=QueueStore(),
        )
        self._lock = threading.Lock()  # writers only; readers take references to whole values
        self._contact: dict[str, float] = {}  # kind -> monotonic time of last sign of life
        self._synced: set[str] = set()
        self._all_synced = False  # every core kind listed once; never goes back to False
        self._failing: set[str] = set()  # kinds between an error (or 410) and their next list
        self._listed_once: set[str] = set()  # kinds served and readable at least once
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: dict[str, Any] = {}
        self.relists: dict[str, int] = defaultdict(int)
        # Called after each relist with the kind's name (the server freezes the GC's view of
        # long-lived summaries then); runs on the watch thread.
        self.on_relist = on_relist

    # ---- FactsSource -----------------------------------------------------------------
    # Writers replace values (a namespace's usage, the class map, the node index) rather than
    # edit them, so the `Facts` a request takes stays consistent while the watch goes on.
    # Every review reads here: lookups only (`bench/instructions.py --facts live`).

    def node_index(self) -> NodeIndex:
        return self.stores.nodes.facts_for("")

    def served_names(self) -> frozenset[str]:
        return self.stores.served_names()

    def facts_for(self, namespace: str) -> Facts:
        return self.stores.facts_for(namespace, self.age_seconds())

    def age_seconds(self) -> float | None:
        """Seconds since the stalest kind last heard from the API server; inf before sync."""
        if not self._all_synced:
            return float("inf")
        return time.monotonic() - min(map(self._contact.__getitem__, _CORE))

    def webhook_seconds(self) -> float | None:
        """The longest the validating webhooks on pods may take; None: unknown."""
        return self.stores.webhook_seconds()

    def pods_current(self) -> bool:
        """Whether the pods watch is listed, open and in step, so a pod stored now shows within
        moments: what lets a GPU hold end at its settle time rather than its full period."""
        if "pods" not in self._synced or "pods" in self._failing:
            return False
        return time.monotonic() - self._contact.get("pods", 0.0) <= self.watch_timeout + 15.0

    @property
    def synced(self) -> bool:
        return self._all_synced

    @property
    def pod_count(self) -> int:
        return self.stores.pods.count()

    # ---- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        for row in WATCHED.values():
            name = f"watch-{row.kind.name}"
            t = threading.Thread(target=self._run, args=(row,), name=name)
            t.daemon = True
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        """End every watch thread within `timeout` in all (not per thread: a pod's grace
        period is 30 s, and a shutdown that outlasts it ends in SIGKILL mid-drain), then close
        the API client's pooled connections: the cache owns the client it was given, and
        nothing it opened outlives it."""
        self._stop.set()
        for resp in list(self._responses.values()):
            _cut(resp)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        close = getattr(self.api_client, "close", None)
        if close is not None:
            close()

    def list_once(self) -> None:
        """One paged list of every kind and no watch: a consistent-enough one-shot snapshot.

        ConfigMaps are optional here: an auditor who may not list them still gets an audit, and
        `envFrom` of a ConfigMap is then judged as unknown (the facts say None). So are the
        optional kinds (404: not installed; 403: unknown), as their stores record.
        """
        from kubernetes.client.exceptions import ApiException

        for row in WATCHED.values():
            try:
                self._list(row)
            except ApiException as exc:
                if not self._not_served(row, exc):
                    raise

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.synced and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.synced

    # ---- the informer loop ------------------------------------------------------------

    def _not_served(self, row: Watched, exc: Exception) -> bool:
        """Whether a failed list is the answer rather than an error, as the kind's store
        records it: 404 (not served: it holds nothing) or 403 (not allowed: unknown, warned)."""
        status = getattr(exc, "status", None)
        if not isinstance(status, int):
            return False
        with self._lock:
            return self.stores.named[row.store].not_served(row.kind.name, status)

    def _run(self, row: Watched) -> None:
        name = row.kind.name
        # A pod's GPU product comes from its node's labels: have the nodes first.
        while row.after and row.after not in self._synced and not self._stop.wait(0.05):
            pass
        backoff = 0.2
        while not self._stop.is_set():
            try:
                version = self._list(row)
                self._listed_once.add(name)
                backoff = 0.2
                while not self._stop.is_set():
                    version = self._watch(row, version)
            except Gone:
                self._failing.add(name)
                log.info("%s: resourceVersion expired (410 Gone); listing again", name)
                continue
            except Exception as exc:
                if self._stop.is_set():
                    return
                self._failing.add(name)
                # A 403 on a kind listed before is a restarted apiserver's RBAC cache warming
                # up: retried soon, what was listed kept (not forgotten for recheck_seconds).
                transient = name in self._listed_once and getattr(exc, "status", 0) == 403
                if row.optional and not transient and self._not_served(row, exc):
                    log.info("%s: looking again in %.0fs", name, self.recheck_seconds)
                    self._stop.wait(self.recheck_seconds)
                    continue
                log.warning("%s: %s; retrying in %.1fs", name, describe(exc), backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def _list(self, row: Watched) -> str:
        """Paged list reduced into fresh items, handed to the kind's store whole when the last
        page arrives: readers keep seeing the previous state until then, never a half-list,
        and whatever was deleted while the watch was down is gone afterwards."""
        name = row.kind.name
        size = min(self.page_size, row.kind.max_page or self.page_size)
        listed = pages(list_call(self.api_client, row.kind), size, decode=row.decode)
        items, count, version = reduced(name, row.reduce, self.stores.nodes, listed)
        with self._lock:
            self.stores.named[row.store].replace(name, items)
        if self.on_relist is not None:
            self.on_relist(name)
        self.relists[name] += 1
        self._contact[name] = time.monotonic()
        self._synced.add(name)
        self._all_synced = self._all_synced or self._synced.issuperset(_CORE)
        self._failing.discard(name)
        log.info("%s: listed %d at resourceVersion %s", name, count, version)
        return version

    def _watch(self, row: Watched, version: str) -> str:
        """One watch request; returns the resourceVersion to resume from when it ends."""
        name = row.kind.name
        resp = list_call(self.api_client, row.kind)(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout,
            _preload_content=False,
        )
        self._responses[name] = resp
        self._contact[name] = time.monotonic()
        if self._stop.is_set():  # stop() ran while the watch opened: it could not cut this one
            _cut(resp)
        try:
            for line in lines_until_cut(resp, name):
                event = orjson.loads(line)
                kind_of, obj = event.get("type"), event.get("object") or {}
                if kind_of == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                version = str((obj.get("metadata") or {}).get("resourceVersion", version))
                self._contact[name] = time.monotonic()
                if kind_of != "BOOKMARK":
                    self._apply(row, kind_of == "DELETED", obj)
        finally:
            self._responses.pop(name, None)
            resp.release_conn()
        return version

    def _apply(self, row: Watched, deleted: bool, obj: dict[str, Any]) -> None:
        """One watch event into the kind's store: the object as it is kept now, or None."""
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        item = None if deleted else row.reduce(row.kind.name, obj, self.stores.nodes)
        value = None if item is None else item[2]
        with self._lock:
            self.stores.named[row.store].put(row.kind.name, namespace, name, value)
            released = row.releases(row.kind.name, obj) if row.releases and not deleted else None
            if released is not None and self.reservations is not None:
                self.reservations.release_for(released)  # its hold has done its job


def _cut(resp: Any) -> None:
    """Wake a thread blocked reading a quiet watch stream: closing the response from another
    thread does not interrupt a read in progress, shutting its socket down does."""
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):  # best effort: the thread may be closing it too
        resp.close()
