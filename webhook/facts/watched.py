"""What the live cache lists and watches, and how it reads the API server's answers.

The kinds: the core ones every cluster serves (part of `synced`), and the optional CRDs
(autoscalers, DRA, KServe runtimes, queues) whose absence (404) is a fact rather than a
failure. `WATCHED` is the table the cache runs on: for each kind, how to list it, the reducer
that makes the compact value kept of one object, and the store (`webhook.facts.stores`) that
keeps it; a kind more is one row more. The reading: paged lists and watch streams as raw JSON
lines, never the client's models.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.facts import dra, objects, queues, servingruntimes, webhookconfigs
from webhook.facts.model import Node, PodGpus
from webhook.facts.podpages import decode_pod_page
from webhook.facts.provisioning import machine_group_shapes, node_pool_shapes
from webhook.facts.stores import UNTOLD, Item, NodeStore

__all__ = [
    "DRA_KINDS",
    "KINDS",
    "PROVISIONING_KINDS",
    "QUEUE_KINDS",
    "SERVING_KINDS",
    "SHAPES",
    "WATCHED",
    "WEBHOOK_KINDS",
    "Kind",
    "Watched",
    "describe",
    "lines_until_cut",
    "pages",
]

log = logging.getLogger("gpu-admission.cache")


@dataclass(frozen=True)
class Kind:
    """How to list and watch one resource kind with the kubernetes client."""

    name: str  # the resource's plural
    api: str  # "core", "scheduling" or "custom" (a CRD, through CustomObjectsApi)
    method: str  # list function on that API class
    # Most objects per list page, below the cache's page size: a page is held whole while it
    # is read, and a ConfigMap may hold 1 MiB (20 of them stay far below the memory limit).
    max_page: int | None = None
    group: str = ""  # a custom kind's API group and version
    version: str = ""


KINDS = (
    Kind("namespaces", "core", "list_namespace"),
    Kind("nodes", "core", "list_node"),
    Kind("resourcequotas", "core", "list_resource_quota_for_all_namespaces"),
    Kind("priorityclasses", "scheduling", "list_priority_class"),
    Kind("pods", "core", "list_pod_for_all_namespaces"),
    Kind("configmaps", "core", "list_config_map_for_all_namespaces", max_page=20),
)

# The autoscalers' objects: CRDs that may not be installed, so never part of `synced`.
_CUSTOM = "list_cluster_custom_object"
PROVISIONING_KINDS = (
    Kind("nodepools", "custom", _CUSTOM, group="karpenter.sh", version="v1"),
    Kind("machinesets", "custom", _CUSTOM, group="cluster.x-k8s.io", version="v1beta1"),
    Kind("machinedeployments", "custom", _CUSTOM, group="cluster.x-k8s.io", version="v1beta1"),
    Kind("machinepools", "custom", _CUSTOM, group="cluster.x-k8s.io", version="v1beta1"),
)
SHAPES: dict[str, Callable[[dict[str, Any]], tuple[Node, ...] | None]] = {
    "nodepools": node_pool_shapes,
    "machinesets": machine_group_shapes,
    "machinedeployments": machine_group_shapes,
    "machinepools": machine_group_shapes,
}
# DRA (resource.k8s.io/v1), optional the same way: a 404 means the cluster does not serve it.
DRA_KINDS = tuple(
    Kind(n, "custom", _CUSTOM, group="resource.k8s.io", version="v1") for n in dra.KINDS
)
# KServe's ServingRuntimes and ClusterServingRuntimes, optional the same way (404: KServe is
# not installed); kept as `webhook.facts.servingruntimes` reduces them.
SERVING_KINDS = tuple(
    Kind(n, "custom", _CUSTOM, group="serving.kserve.io", version="v1alpha1")
    for n in servingruntimes.KINDS
)

# Kueue's LocalQueues, ClusterQueues and ResourceFlavors (v1beta2 and v1beta1) and KAI's
# Queues, optional the same way (404: that version or project is not installed); kept as
# `webhook.facts.queues` reduces them. The cache kind's name carries a version other than
# the newest (`localqueues.v1beta1`); the list call takes the plural.
QUEUE_KINDS = tuple(
    Kind(
        k,
        "custom",
        _CUSTOM,
        group=queues.KAI_GROUP if k in queues.KAI_KINDS else queues.KUEUE_GROUP,
        version=queues.plural_of(k)[1],
    )
    for k in queues.KINDS
)

# The validating webhooks on pods: how long the admission chain may keep a create from being
# stored after we answer (`webhookconfigs`). Served everywhere; a 403 leaves it unknown.
WEBHOOK_KINDS = (
    Kind(webhookconfigs.KIND, "admissionregistration", "list_validating_webhook_configuration"),
)

# ---- the table: each kind's reducer and store ---------------------------------------------

# One object of a kind as its store keeps it, or None when nothing of it is kept (a pod of no
# GPU, a ConfigMap without a relevant key); `nodes` gives a pod its node's GPU product.
Reducer = Callable[[str, dict[str, Any], NodeStore], Item | None]


@dataclass(frozen=True)
class Watched:
    """One watched kind: how to list it, what is kept of an object, and where."""

    kind: Kind
    reduce: Reducer
    store: str  # the name of its store in `Stores.named`
    # A kind the cluster may not serve (a CRD, an API group): a 404 or 403 on its list is a
    # fact its store records (`Store.not_served`), looked for again later; a core kind's
    # failure is an error retried with backoff, and its first list is part of `synced`.
    optional: bool = False
    decode: Callable[[bytes], dict[str, Any]] = orjson.loads  # a list page's body
    after: str = ""  # a kind listed before this one starts (a pod's product is its node's)
    # Called with each object a watch adds or changes (not deleted): the pod whose hold an
    # object ends, if any (a claim made from a template for an admitted pod now counts).
    releases: Callable[[str, dict[str, Any]], PodGpus | None] | None = None


def _meta(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def _pod(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item | None:
    pod = objects.pod_summary(obj, nodes.product, nodes.memory)
    return None if pod is None else (pod.namespace, pod.name, pod)


def _namespace(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item:
    meta = obj.get("metadata") or {}
    return "", meta.get("name", ""), dict(meta.get("labels") or {})


def _node(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item:
    return "", _meta(obj)[1], objects.node(obj)


def _quota(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item:
    quota = objects.quota(obj)
    return quota.namespace, quota.name, quota


def _priority_class(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item:
    return "", _meta(obj)[1], objects.priority_class(obj)


def _config_map(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item | None:
    keys = objects.config_map_keys(obj)
    return (*_meta(obj), keys) if keys else None


def _shapes(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item:
    shapes = SHAPES[kind](obj)
    return (*_meta(obj), UNTOLD if shapes is None else shapes)


def _dra(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item:
    return dra.reduce(kind, obj)


def _runtime(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item:
    return servingruntimes.reduce(kind, obj)


def _webhooks(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item:
    return webhookconfigs.reduce(obj)


def _queue(kind: str, obj: dict[str, Any], nodes: NodeStore) -> Item:
    return queues.reduce(kind, obj)


def _claim_made_for(kind: str, obj: dict[str, Any]) -> PodGpus | None:
    owner = dra.claim_owner(obj) if kind == "resourceclaims" else ""
    return PodGpus(_meta(obj)[0], owner, "", {}) if owner else None


def _table() -> dict[str, Watched]:
    core = {k.name: k for k in KINDS}
    rows = [
        Watched(core["namespaces"], _namespace, "namespaces"),
        Watched(core["nodes"], _node, "nodes"),
        Watched(core["resourcequotas"], _quota, "quotas"),
        Watched(core["priorityclasses"], _priority_class, "classes"),
        Watched(core["pods"], _pod, "pods", decode=decode_pod_page, after="nodes"),
        Watched(core["configmaps"], _config_map, "config_maps"),
    ]
    rows += [Watched(k, _shapes, "provisioning", True) for k in PROVISIONING_KINDS]
    rows += [Watched(k, _dra, "dra", True, releases=_claim_made_for) for k in DRA_KINDS]
    rows += [Watched(k, _runtime, "runtimes", True) for k in SERVING_KINDS]
    rows += [Watched(k, _webhooks, "webhooks", True) for k in WEBHOOK_KINDS]
    rows += [Watched(k, _queue, "queues", True) for k in QUEUE_KINDS]
    return {row.kind.name: row for row in rows}


# Every kind the cache watches, in the order they start (nodes before pods), by name.
WATCHED: dict[str, Watched] = _table()


def pages(
    fn: Callable[..., Any],
    page_size: int,
    *,
    decode: Callable[[bytes], dict[str, Any]] = orjson.loads,
    **kwargs: Any,
) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(items, list metadata) of each page of a paged list (`limit` + `continue`).

    Raw JSON through orjson (or `decode`, which may keep less of each object), not the
    client's models: a page of 500 pods deserialised into V1Pod objects costs seconds. The
    last page's metadata holds the list's resourceVersion.
    """
    token: str | None = None
    while True:
        args: dict[str, Any] = {"limit": page_size, "_preload_content": False, **kwargs}
        if token:
            args["_continue"] = token
        resp = fn(**args)
        try:
            body = decode(resp.data)
        finally:
            resp.release_conn()
        meta = body.get("metadata") or {}
        yield body.get("items") or [], meta
        token = meta.get("continue")
        if not token:
            return


def lines_until_cut(resp: Any, kind: str) -> Iterator[bytes]:
    """JSON lines of a watch stream, however the chunks split them.

    A connection cut mid-stream just ends the lines: the caller resumes the watch from the
    last resourceVersion it saw, as client-go's reflector does, without a relist.
    """
    import urllib3

    buffer = b""
    try:
        for chunk in resp.stream(64 * 1024, decode_content=False):
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    yield line
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        log.info("%s: watch connection cut (%s); resuming", kind, type(exc).__name__)
        time.sleep(0.05)  # a server that cuts every stream at once must not spin us
        return
    if buffer.strip():
        yield buffer


def describe(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    return f"HTTP {status}" if status else f"{type(exc).__name__}: {exc}"
