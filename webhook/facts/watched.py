"""What the live cache lists and watches, and how it reads the API server's answers.

The kinds: the core ones every cluster serves (part of `synced`), and the optional CRDs
(autoscalers, DRA, KServe runtimes) whose absence (404) is a fact rather than a failure. The
reading: paged lists and watch streams as raw JSON lines, never the client's models.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.facts import dra, queues, servingruntimes, webhookconfigs
from webhook.facts.model import Node
from webhook.facts.provisioning import machine_group_shapes, node_pool_shapes

__all__ = [
    "DRA_KINDS",
    "KINDS",
    "PROVISIONING_KINDS",
    "QUEUE_KINDS",
    "SERVING_KINDS",
    "SHAPES",
    "WEBHOOK_KINDS",
    "Kind",
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
