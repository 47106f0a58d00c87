"""AdmissionReview v1 on the wire: a strict envelope around a tolerant object.

The envelope is checked field by field (a bad one is the caller's bug: HTTP 400); the object
inside stays raw JSON for the pod views, which judge it field by field themselves.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["AdmissionRequest", "AdmissionReview", "BadReview", "decode", "encode"]

API_VERSION = "admission.k8s.io/v1"


class BadReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer (HTTP 400)."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class GroupVersionKind(_Wire):
    group: str = ""
    version: str
    kind: str = Field(min_length=1)


class GroupVersionResource(_Wire):
    group: str = ""
    version: str
    resource: str = Field(min_length=1)


class AdmissionRequest(_Wire):
    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource | None = None  # unused; some test fixtures omit it
    sub_resource: str = Field(default="", alias="subResource")
    name: str = ""
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    object: Any = None
    old_object: Any = Field(default=None, alias="oldObject")
    dry_run: bool = Field(default=False, alias="dryRun")


class AdmissionReview(_Wire):
    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


def _explain(exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        if err["type"] == "literal_error" and where == "apiVersion":
            problems.append(f"apiVersion must be {API_VERSION} (this webhook speaks v1 only)")
        elif err["type"].startswith("json_"):
            problems.append(f"body is not valid JSON: {err['msg']}")
        else:
            problems.append(f"{where}: {err['msg']}")
    return "not an AdmissionReview: " + "; ".join(problems)


def decode(body: bytes) -> AdmissionReview:
    """Parse and check a review; raise `BadReview` with a reason a person can act on."""
    if not body:
        raise BadReview("empty body: expected an AdmissionReview JSON object")
    try:
        return AdmissionReview.model_validate_json(body)
    except ValidationError as exc:
        raise BadReview(_explain(exc)) from None


def encode(
    uid: str,
    *,
    allowed: bool,
    patch: list[dict[str, Any]] | None = None,
    warnings: list[str] | None = None,
    code: int = 403,
    reason: str = "Forbidden",
    message: str = "",
    audit_annotations: dict[str, str] | None = None,
) -> bytes:
    """The response review; the patch travels base64-encoded as the API requires."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    if not allowed:
        response["status"] = {"code": code, "reason": reason, "message": message}
    if warnings:
        response["warnings"] = warnings
    if audit_annotations:
        response["auditAnnotations"] = audit_annotations
    return orjson.dumps(
        {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
    )
