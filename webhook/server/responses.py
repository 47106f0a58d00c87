"""AdmissionReview v1 responses: the decision as the apiserver reads it, built once a review.

Apart from the request side (review.py) so that this one can be compiled with the engine:
msgspec reads the request structs' annotations at run time, which a compiled module does not
keep.
"""

from __future__ import annotations

import binascii
from typing import Any

import orjson

from webhook.engine.decision import Decision
from webhook.server.review import API_VERSION

__all__ = ["encode", "respond"]


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
        # base64.b64encode is this call behind an interpreted wrapper.
        response["patch"] = binascii.b2a_base64(orjson.dumps(patch), newline=False).decode()
    if not allowed:
        response["status"] = {"code": code, "reason": reason, "message": message}
    if warnings:
        response["warnings"] = warnings
    if audit_annotations:
        response["auditAnnotations"] = audit_annotations
    return orjson.dumps(
        {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
    )


def respond(uid: str, decision: Decision | None) -> bytes:
    """The response review for a decision (None: allowed untouched, the engine never looked).

    `/mutate` decisions carry a patch and the rules that made it; `/validate` decisions carry
    verdicts. An unreadable object is the caller's error: 400, naming the field.
    """
    if decision is None:
        return encode(uid, allowed=True)
    if decision.unreadable is not None:
        return encode(
            uid,
            allowed=False,
            code=400,
            reason="BadRequest",
            message=f"gpu-admission: {decision.unreadable.message()}",
        )
    annotations = dict.fromkeys(decision.mutated_by, "mutated")
    annotations.update(decision.annotations())
    return encode(
        uid,
        allowed=decision.allowed,
        patch=list(decision.patch),
        message=decision.message(),
        warnings=decision.warning_lines(),
        audit_annotations=annotations or None,
    )
