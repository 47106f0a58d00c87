"""AdmissionReview v1 requests on the wire: a strict envelope around a tolerant object.

The envelope is checked field by field (a bad one is the caller's bug: HTTP 400); the object
inside stays raw JSON for the pod views, which judge it field by field themselves.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["API_VERSION", "AdmissionRequest", "AdmissionReview", "BadReview", "decode"]

API_VERSION = "admission.k8s.io/v1"


class BadReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer (HTTP 400)."""


class GroupVersionKind(msgspec.Struct, frozen=True):
    kind: str
    group: str = ""
    version: str = ""


class UserInfo(msgspec.Struct, frozen=True):
    """Who sent the request: the workload exemptions trust a pod only when the controller
    that makes such pods created it (`engine.exempt`)."""

    username: str = ""


class AdmissionRequest(msgspec.Struct, frozen=True, rename="camel"):
    """The request fields the webhook reads. The objects stay raw JSON until a rule needs them:
    most pods ask for no GPU, and the prefilter answers those without parsing the object."""

    uid: str
    kind: GroupVersionKind
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    sub_resource: str = ""
    name: str = ""
    namespace: str = ""
    object: msgspec.Raw = msgspec.Raw(b"null")
    old_object: msgspec.Raw = msgspec.Raw(b"null")
    dry_run: bool = False
    user_info: UserInfo = UserInfo()

    @property
    def raw_object(self) -> bytes:
        return bytes(self.object)

    @property
    def raw_old_object(self) -> bytes:
        return bytes(self.old_object)


class AdmissionReview(msgspec.Struct, frozen=True, rename="camel"):
    api_version: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


# msgspec, not pydantic, on this one hot path: it checks the envelope and leaves the object
# as raw bytes in ~3 µs, where a full parse costs ~10x that (bench/load.py, docs/benchmarks.md).
_DECODER = msgspec.json.Decoder(AdmissionReview)


# What a failed typed decode is explained against, in the project's words (never msgspec's,
# which change between releases): each field, the JSON type it needs (or its allowed values),
# and whether it is required. Only a body the fast decode refused is walked this way.
_Spec = dict[str, tuple[str | tuple[str, ...], bool]]
_ENVELOPE: _Spec = {"apiVersion": ((API_VERSION,), True), "kind": (("AdmissionReview",), True)}
_REQUEST: _Spec = {
    "uid": ("string", True),
    "kind": ("object", True),
    "operation": (("CREATE", "UPDATE", "DELETE", "CONNECT"), True),
    "subResource": ("string", False),
    "name": ("string", False),
    "namespace": ("string", False),
    "dryRun": ("boolean", False),
    "userInfo": ("object", False),
}
_GVK: _Spec = {"kind": ("string", True), "group": ("string", False), "version": ("string", False)}
_JSON_TYPES = {b"{": "object", b"[": "array", b'"': "string", b"t": "boolean", b"f": "boolean"}


def _json_type(raw: bytes | bytearray) -> str:
    first = bytes(raw.lstrip()[:1])
    return "null" if first == b"n" else _JSON_TYPES.get(first, "number")


def _members(raw: bytes | bytearray, where: str) -> dict[str, msgspec.Raw]:
    """The members of a JSON object one level deep (values left raw), or why it is not one."""
    try:
        return msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    except msgspec.ValidationError:
        raise BadReview(f"{where}: expected an object, found {_an(_json_type(raw))}") from None


def _an(json_type: str) -> str:
    return f"an {json_type}" if json_type[0] in "aeiou" else f"a {json_type}"


def _check(members: dict[str, msgspec.Raw], spec: _Spec, prefix: str) -> None:
    for name, (expected, required) in spec.items():
        where = f"{prefix}{name}"
        if name not in members:
            if required:
                raise BadReview(f"{where}: required field missing")
            continue
        raw = bytes(members[name])
        found = _json_type(raw)
        if isinstance(expected, tuple):
            value = msgspec.json.decode(raw) if found == "string" else None
            if value not in expected:
                shown = repr(value) if found == "string" else _an(found)
                if name == "apiVersion":
                    raise BadReview(f"{where} must be {API_VERSION} (v1 only), found {shown}")
                raise BadReview(f"{where}: {shown} is not one of: {', '.join(expected)}")
        elif found != expected:
            raise BadReview(f"{where}: expected {_an(expected)}, found {_an(found)}")


def _explain(body: bytes | bytearray) -> str:
    """Why the typed decode refused `body`, found by walking it field by field."""
    try:
        envelope = _members(body, "body")
        _check(envelope, _ENVELOPE, "")
        if "request" not in envelope:
            raise BadReview("request: required field missing")
        request = _members(bytes(envelope["request"]), "request")
        _check(request, _REQUEST, "request.")
        _check(_members(bytes(request["kind"]), "request.kind"), _GVK, "request.kind.")
    except BadReview as exc:
        return f"not an AdmissionReview: {exc}"
    except msgspec.DecodeError:
        return "not an AdmissionReview: body is not valid JSON"
    except RecursionError:
        return "not an AdmissionReview: body is nested too deeply"
    return "not an AdmissionReview"


def decode(body: bytes | bytearray) -> AdmissionReview:
    """Parse and check a review; raise `BadReview` with a reason a person can act on."""
    if not body:
        raise BadReview("empty body: expected an AdmissionReview JSON object")
    try:
        review = _DECODER.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise BadReview(_explain(body)) from None
    except RecursionError:
        raise BadReview("not an AdmissionReview: body is nested too deeply") from None
    if not review.request.uid:
        raise BadReview("not an AdmissionReview: request.uid: must not be empty")
    return review
