"""The webhook's live cluster facts: list+watch through the `kubernetes` client, kept compact.

One thread per resource kind runs the informer loop the API server expects: a paged list
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
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import orjson

from webhook.facts import dra, objects, queues, servingruntimes, webhookconfigs
from webhook.facts.client import list_call
from webhook.facts.model import (
    EMPTY_USAGE,
    GPU_PRODUCT_LABEL,
    TERMINATED,
    Facts,
    Node,
    NodeIndex,
    PodGpus,
    PriorityClass,
    Quota,
    Usage,
)
from webhook.facts.podpages import decode_pod_page
from webhook.facts.provisioning import Provisioning, listed_shapes
from webhook.facts.relist import Fresh, Shapes
from webhook.facts.reservations import Reservations
from webhook.facts.usages import NamespaceUsages
from webhook.facts.watched import (
    DRA_KINDS,
    KINDS,
    PROVISIONING_KINDS,
    QUEUE_KINDS,
    SERVING_KINDS,
    SHAPES,
    WEBHOOK_KINDS,
    Kind,
    describe,
    lines_until_cut,
    pages,
)
from webhook.podrequest import memory_of

__all__ = ["DRA_KINDS", "KINDS", "PROVISIONING_KINDS", "SERVING_KINDS", "LiveCache", "pages"]

log = logging.getLogger("gpu-admission.cache")


_OPTIONAL = PROVISIONING_KINDS + DRA_KINDS + SERVING_KINDS + WEBHOOK_KINDS + QUEUE_KINDS

# What a namespace without a relevant ConfigMap hands out: known, and empty.
_NO_CONFIG_MAPS: Mapping[str, Mapping[str, str]] = MappingProxyType({})
_NO_QUOTAS: Mapping[str, Quota] = MappingProxyType({})
# The kinds `synced` and `age_seconds` are about: the core ones every cluster serves.
_CORE = tuple(k.name for k in KINDS)


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
        self._namespaces: dict[str, dict[str, str]] = {}
        self._nodes: dict[str, Node] = {}
        self._node_index = NodeIndex()  # rebuilt when a node changes, shared between reads
        self._quotas: dict[str, dict[str, Quota]] = defaultdict(dict)  # namespace -> name -> quota
        self._classes: dict[str, PriorityClass] = {}
        self._pods: dict[tuple[str, str], PodGpus] = {}
        self._usage: dict[str, Usage] = defaultdict(Usage)
        # namespace -> ConfigMap name -> its NVIDIA_VISIBLE_DEVICES-capable keys; a ConfigMap
        # with none is not kept (absent = no such key, which the isolation rules read right).
        self._config_maps: dict[str, dict[str, dict[str, str]]] = {}
        # Autoscaler kinds: listed ones hold their objects' shapes; `_absent` are not installed;
        # a kind in neither is unknown (not listed yet, or forbidden).
        self._autoscaling: dict[str, Shapes] = {}
        self._absent: set[str] = set()
        self._provisionable: Provisioning | None = None  # rebuilt whole on each change
        self._dra = dra.DraCache()  # DeviceClasses, claim templates and claims
        self._usages = NamespaceUsages(
            lambda: self._usage, lambda: self._namespaces, self._dra.claim_devices
        )
        self._runtimes = servingruntimes.RuntimeStore()  # KServe's serving runtimes
        self._webhooks = webhookconfigs.WebhookTimeouts()  # how long the chain waits
        self._queues = queues.QueueStore()  # Kueue's and KAI's queues
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
        return self._node_index

    def served_names(self) -> frozenset[str]:
        return self._dra.served_names()

    def facts_for(self, namespace: str) -> Facts:
        config_maps: Mapping[str, Mapping[str, str]] | None = None  # unknown until listed
        if "configmaps" in self._synced:
            config_maps = self._config_maps.get(namespace, _NO_CONFIG_MAPS)
        # Positional: the compiled constructor parses keywords at several times the cost.
        return Facts(
            namespace,
            self._namespaces.get(namespace),  # namespace_labels
            tuple(self._quotas.get(namespace, _NO_QUOTAS).values()),  # quotas
            self._usage.get(namespace, EMPTY_USAGE),  # usage
            self._classes,  # priority_classes
            self._node_index,  # nodes
            self.age_seconds(),
            config_maps,
            None,  # secrets: never watched (see above)
            self._provisionable,
            self._runtimes.facts_for(namespace),  # serving_runtimes
            self._dra.facts_for(namespace),  # dra
            None,  # unheld: holds are ReservingFacts' to add
            self._usages,  # every namespace's, for budgets over several
            self._queues.facts_for(namespace),  # queues
        )

    def age_seconds(self) -> float | None:
        """Seconds since the stalest kind last heard from the API server; inf before sync."""
        if not self._all_synced:
            return float("inf")
        return time.monotonic() - min(map(self._contact.__getitem__, _CORE))

    def webhook_seconds(self) -> float | None:
        """The longest the validating webhooks on pods may take; None: unknown."""
        return self._webhooks.longest()

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
        return len(self._pods)

    # ---- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        for kind in KINDS + _OPTIONAL:
            t = threading.Thread(target=self._run, args=(kind,), name=f"watch-{kind.name}")
            t.daemon = True
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for resp in list(self._responses.values()):
            with contextlib.suppress(Exception):  # best effort: wakes a blocked watch read
                resp.close()
        for t in self._threads:
            t.join(timeout)

    def list_once(self) -> None:
        """One paged list of every kind and no watch: a consistent-enough one-shot snapshot.

        ConfigMaps are optional here: an auditor who may not list them still gets an audit, and
        `envFrom` of a ConfigMap is then judged as unknown (the facts say None). So are the
        autoscaler kinds (404: not installed; 403: provisioning unknown).
        """
        from kubernetes.client.exceptions import ApiException

        for kind in KINDS + _OPTIONAL:
            try:
                self._list(kind)
            except ApiException as exc:
                if kind in _OPTIONAL and self._not_served(kind, exc):
                    continue
                if kind.name != "configmaps" or exc.status != 403:
                    raise
                log.warning("configmaps: not allowed to list them (403); envFrom is unknown")

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.synced and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.synced

    # ---- the informer loop ------------------------------------------------------------

    def _not_served(self, kind: Kind, exc: Exception) -> bool:
        """Whether an autoscaler kind's failure is the answer rather than an error: 404 (the
        CRD is not installed: it holds nothing) or 403 (not allowed: unknown, warned)."""
        status = getattr(exc, "status", None)
        if status not in (404, 403):
            return False
        if kind in SERVING_KINDS:
            with self._lock:
                return self._runtimes.not_served(kind.name, status)
        if kind in WEBHOOK_KINDS:
            with self._lock:
                return self._webhooks.not_served(status)
        with self._lock:
            if kind in QUEUE_KINDS:
                return self._queues.not_served(kind.name, status)
            if kind in DRA_KINDS:
                self._dra.not_served(kind.name, forbidden=status == 403)
            else:
                self._autoscaling.pop(kind.name, None)
                if status == 404:
                    self._absent.add(kind.name)
                else:
                    self._absent.discard(kind.name)
                self._provisionable = self._provisionable_now()
        if status == 404:
            log.info(
                "%s: not installed (404); looking again in %.0fs", kind.name, self.recheck_seconds
            )
        else:
            log.warning(
                "%s: not allowed to list them (403); %s",
                kind.name,
                "pods' DRA claims are unknown, so they make no pod a GPU pod"
                if kind in DRA_KINDS
                else "the GPU nodes the cluster can create are unknown, so a missing one is a "
                "warning",
            )
        return True

    def _run(self, kind: Kind) -> None:
        if kind.name == "pods":
            # A pod's GPU product comes from its node's labels: have the nodes first.
            while "nodes" not in self._synced and not self._stop.wait(0.05):
                pass
        backoff = 0.2
        while not self._stop.is_set():
            try:
                version = self._list(kind)
                self._listed_once.add(kind.name)
                backoff = 0.2
                while not self._stop.is_set():
                    version = self._watch(kind, version)
            except Gone:
                self._failing.add(kind.name)
                log.info("%s: resourceVersion expired (410 Gone); listing again", kind.name)
                continue
            except Exception as exc:
                if self._stop.is_set():
                    return
                self._failing.add(kind.name)
                # A 403 on a kind listed before is a restarted apiserver's RBAC cache warming
                # up: retried soon, what was listed kept (not forgotten for recheck_seconds).
                transient = kind.name in self._listed_once and getattr(exc, "status", 0) == 403
                if kind in _OPTIONAL and not transient and self._not_served(kind, exc):
                    self._stop.wait(self.recheck_seconds)
                    continue
                log.warning("%s: %s; retrying in %.1fs", kind.name, describe(exc), backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    def _list(self, kind: Kind) -> str:
        """Paged list into fresh structures, swapped in whole when the last page arrives.

        Pods are reduced to summaries page by page, so memory holds one page of objects, not
        the cluster; readers keep seeing the previous state until the swap, never a half-list;
        and whatever was deleted while the watch was down is gone afterwards.
        """
        fresh = Fresh(self._node_product, self._node_memory)
        count, version = 0, ""
        size = min(self.page_size, kind.max_page or self.page_size)
        # Pods: only the fields a summary reads are decoded (most of a relist's work).
        decode = decode_pod_page if kind.name == "pods" else orjson.loads
        for items, meta in pages(list_call(self.api_client, kind), size, decode=decode):
            for obj in items:
                fresh.add(kind.name, obj)
                count += 1
            version = str(meta.get("resourceVersion", ""))
        self._swap(kind.name, fresh)
        if self.on_relist is not None:
            self.on_relist(kind.name)
        self.relists[kind.name] += 1
        self._contact[kind.name] = time.monotonic()
        self._synced.add(kind.name)
        self._all_synced = self._all_synced or self._synced.issuperset(_CORE)
        self._failing.discard(kind.name)
        log.info("%s: listed %d at resourceVersion %s", kind.name, count, version)
        return version

    def _watch(self, kind: Kind, version: str) -> str:
        """One watch request; returns the resourceVersion to resume from when it ends."""
        fn = list_call(self.api_client, kind)
        resp = fn(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout,
            _preload_content=False,
        )
        self._responses[kind.name] = resp
        self._contact[kind.name] = time.monotonic()
        try:
            for line in lines_until_cut(resp, kind.name):
                event = orjson.loads(line)
                kind_of, obj = event.get("type"), event.get("object") or {}
                if kind_of == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                version = str((obj.get("metadata") or {}).get("resourceVersion", version))
                self._contact[kind.name] = time.monotonic()
                if kind_of != "BOOKMARK":
                    self._apply(kind.name, kind_of, obj)
        finally:
            self._responses.pop(kind.name, None)
            resp.release_conn()
        return version

    # ---- applying objects -------------------------------------------------------------

    def _swap(self, kind: str, fresh: Fresh) -> None:
        with self._lock:
            if kind == "pods":
                self._pods, self._usage = fresh.pods, fresh.usage
                if self.reservations is not None:
                    self.reservations.release_listed(fresh.pods.values())
            elif kind == "namespaces":
                self._namespaces = fresh.namespaces
            elif kind == "nodes":
                self._nodes = fresh.nodes
                self._node_index = NodeIndex(fresh.nodes.values())
            elif kind == "resourcequotas":
                self._quotas = fresh.quotas
            elif kind == "priorityclasses":
                self._classes = fresh.classes
            elif kind == "configmaps":
                self._config_maps = fresh.config_maps
            elif kind in SHAPES:
                self._autoscaling[kind] = fresh.autoscaling
                self._absent.discard(kind)
                self._provisionable = self._provisionable_now()
            elif kind in dra.KINDS:
                self._dra.replace(kind, fresh.dra)
            elif kind in servingruntimes.KINDS:
                self._runtimes.replace(kind, fresh.runtimes)
            elif kind == webhookconfigs.KIND:
                self._webhooks.replace(fresh.webhooks)
            elif kind in queues.KINDS:
                self._queues.replace(kind, fresh.queues)

    def _provisionable_now(self) -> Provisioning | None:
        """Every listed autoscaler kind's shapes (`provisioning.listed_shapes`)."""
        names = tuple(k.name for k in PROVISIONING_KINDS)
        return listed_shapes(names, self._autoscaling, self._absent)

    def _node_product(self, name: str) -> str:
        node = self._nodes.get(name)
        return node.labels.get(GPU_PRODUCT_LABEL, "") if node else ""

    def _node_memory(self, name: str) -> int | None:
        node = self._nodes.get(name)
        return memory_of(node.labels) if node else None

    def _apply(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name, ns = meta.get("name", ""), meta.get("namespace", "")
        deleted = event == "DELETED"
        with self._lock:
            if kind == "pods":
                self._apply_pod((ns, name), None if deleted else obj)
            elif kind == "namespaces":
                if deleted:
                    self._namespaces.pop(name, None)
                else:
                    self._namespaces[name] = dict(meta.get("labels") or {})
            elif kind == "nodes":
                node = None if deleted else objects.node(obj)
                if self._nodes.get(name) == node:
                    return  # a status heartbeat: nothing the rules read has changed
                if node is None:
                    self._nodes.pop(name, None)
                else:
                    self._nodes[name] = node
                self._node_index = NodeIndex(self._nodes.values())
            elif kind == "resourcequotas":
                quotas = dict(self._quotas.get(ns, {}))
                if deleted:
                    quotas.pop(name, None)
                else:
                    quotas[name] = objects.quota(obj)
                self._quotas[ns] = quotas
            elif kind == "priorityclasses":
                classes = dict(self._classes)
                if deleted:
                    classes.pop(name, None)
                else:
                    classes[name] = objects.priority_class(obj)
                self._classes = classes
            elif kind == "configmaps":
                keys = {} if deleted else objects.config_map_keys(obj)
                objects.put_config_map_keys(self._config_maps, ns, name, keys)
            elif kind == webhookconfigs.KIND:
                self._webhooks.put(name, None if deleted else webhookconfigs.reduce(obj)[1])
            elif kind in queues.KINDS:
                self._queues.put(kind, ns, name, None if deleted else queues.reduce(kind, obj)[2])
            elif kind in servingruntimes.KINDS:
                runtime = None if deleted else servingruntimes.reduce(kind, obj)[1]
                self._runtimes.put(kind, ns, name, runtime)
            elif kind in dra.KINDS:
                self._dra.put(kind, ns, name, None if deleted else dra.reduce(kind, obj)[2])
                owner = dra.claim_owner(obj) if kind == "resourceclaims" and not deleted else ""
                if owner and self.reservations is not None:
                    # The claim made for an admitted pod now counts: its hold has done its job.
                    self.reservations.release_for(PodGpus(ns, owner, "", {}))
            elif kind in SHAPES:
                shapes = dict(self._autoscaling.get(kind, {}))
                if deleted:
                    shapes.pop((ns, name), None)
                else:
                    shapes[(ns, name)] = SHAPES[kind](obj)
                self._autoscaling[kind] = shapes
                self._provisionable = self._provisionable_now()

    def _apply_pod(self, key: tuple[str, str], obj: dict[str, Any] | None) -> None:
        old = self._pods.pop(key, None)
        if old is not None and old.phase not in TERMINATED:
            self._count(old, -1)
        new = objects.pod_summary(obj, self._node_product, self._node_memory) if obj else None
        if new is None:
            return
        self._pods[key] = new
        if new.phase not in TERMINATED:
            self._count(new, 1)
        if old is None and self.reservations is not None:
            self.reservations.release_for(new)

    def _count(self, pod: PodGpus, sign: int) -> None:
        """A new usage total for the pod's namespace; readers may hold the old one."""
        self._usage[pod.namespace] = self._usage.get(pod.namespace, EMPTY_USAGE).plus([pod], sign)
