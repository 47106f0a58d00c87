"""The AdmissionReview the apiserver would send for a manifest (`gpu-admission review FILE`):
what to post to a running webhook by hand, with curl, to see its patch and verdict."""

from __future__ import annotations

import uuid
from typing import Any

from webhook.engine.admit import cluster_scoped
from webhook.engine.podviews import group_of
from webhook.engine.workloads import WorkloadTable

__all__ = ["admission_review"]


def _version_of(api_version: Any) -> str:
    text = api_version if isinstance(api_version, str) else "v1"
    return text.rpartition("/")[2]


def admission_review(
    obj: dict[str, Any],
    table: WorkloadTable,
    *,
    operation: str = "CREATE",
    namespace: str | None = None,
    dry_run: bool = False,
    old: dict[str, Any] | None = None,
    username: str = "kubernetes-admin",
) -> dict[str, Any]:
    """An `admission.k8s.io/v1` review of `obj` as the apiserver builds it: kind and resource
    (the plural from the workload table), the request namespace (empty for cluster-scoped
    kinds), a fresh uid, the user, and `oldObject` on UPDATE."""
    kind = str(obj.get("kind", ""))
    group, version = group_of(obj.get("apiVersion")), _version_of(obj.get("apiVersion"))
    workload = table.get(group, kind)
    resource = workload.declared.resource if workload is not None else kind.lower() + "s"
    found = obj.get("metadata")
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    if cluster_scoped(table, group, kind):
        ns = ""
    else:
        ns = namespace or str(meta.get("namespace") or "default")
    gvk = {"group": group, "version": version, "kind": kind}
    gvr = {"group": group, "version": version, "resource": resource}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": str(meta.get("name") or ""),
            "namespace": ns,
            "operation": operation,
            "userInfo": {
                "username": username,
                "groups": ["system:masters", "system:authenticated"],
            },
            "object": obj,
            "oldObject": old if operation == "UPDATE" else None,
            "dryRun": dry_run,
            "options": {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "UpdateOptions" if operation == "UPDATE" else "CreateOptions",
            },
        },
    }
