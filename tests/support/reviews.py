"""AdmissionReviews as the apiserver sends them, and their answers decoded."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Any

import jsonpatch

RESOURCES = {
    "Pod": ("", "v1", "pods"),
    "PodTemplate": ("", "v1", "podtemplates"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "Job": ("batch", "v1", "jobs"),
    "CronJob": ("batch", "v1", "cronjobs"),
}


ALICE = "alice@example.com"  # who sends a review unless a test says otherwise


def review_for(
    obj: Any,
    *,
    kind: str | None = None,
    namespace: str = "ml-team",
    operation: str = "CREATE",
    old: Any = None,
    uid: str | None = None,
    dry_run: bool = False,
    subresource: str = "",
    user: str = ALICE,
) -> dict[str, Any]:
    """An AdmissionReview as the apiserver sends it for `obj` (a subresource such as
    `ephemeralcontainers` keeps the Pod's kind and names the subresource), sent by `user`."""
    kind = kind or obj["kind"]
    group, version, resource = RESOURCES.get(kind, ("example.com", "v1", kind.lower() + "s"))
    api_version = obj.get("apiVersion") if isinstance(obj, dict) else None
    if isinstance(api_version, str):  # the object's own apiVersion wins: batch.volcano.sh Job
        group, _, version = api_version.rpartition("/")
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": (obj.get("metadata") or {}).get("name", "") if isinstance(obj, dict) else "",
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        **({"subResource": subresource, "requestSubResource": subresource} if subresource else {}),
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {
            "apiVersion": "meta.k8s.io/v1",
            "kind": "UpdateOptions" if operation == "UPDATE" else "CreateOptions",
        },
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@dataclass
class Answer:
    """One AdmissionReview response, decoded."""

    raw: dict[str, Any]

    @property
    def allowed(self) -> bool:
        return bool(self.raw["allowed"])

    @property
    def patch(self) -> list[dict[str, Any]]:
        if "patch" not in self.raw:
            return []
        assert self.raw["patchType"] == "JSONPatch"
        return list(jsonpatch.JsonPatch.from_string(base64.b64decode(self.raw["patch"]).decode()))

    @property
    def message(self) -> str:
        return str((self.raw.get("status") or {}).get("message", ""))

    @property
    def warnings(self) -> list[str]:
        return list(self.raw.get("warnings") or [])

    @property
    def denied_rules(self) -> set[str]:
        return {line.split(":", 1)[0] for line in self.message.splitlines() if line}

    @property
    def warned_rules(self) -> set[str]:
        return {w.split(":", 1)[0] for w in self.warnings}

    def apply(self, obj: Any) -> Any:
        return jsonpatch.apply_patch(obj, self.patch) if self.patch else obj
