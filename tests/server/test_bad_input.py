"""Bad input gets a clear 4xx or a denial naming the field; the server never falls over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.paths import CORPUS
from tests.support.reviews import review_for
from tests.support.webhook import Webhook
from webhook.server.review import BadReview, decode


def envelope(**request: Any) -> bytes:
    base = review_for({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}})
    base["request"].update(request)
    return json.dumps(base).encode()


def without(key: str) -> bytes:
    review = review_for({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}})
    del review["request"][key]
    return json.dumps(review).encode()


BAD_BODIES = {
    "empty body": (b"", "empty body"),
    "not json": (b"{this is not json", "not valid JSON"),
    "a json array": (b"[1, 2, 3]", "body: expected an object, found an array"),
    "v1beta1 review": (
        json.dumps({**json.loads(envelope()), "apiVersion": "admission.k8s.io/v1beta1"}).encode(),
        "admission.k8s.io/v1",
    ),
    "wrong kind": (
        json.dumps({**json.loads(envelope()), "kind": "Pod"}).encode(),
        "kind: 'Pod' is not one of: AdmissionReview",
    ),
    "no request": (
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
        "request",
    ),
    "no uid": (without("uid"), "request.uid: required field missing"),
    "empty uid": (envelope(uid=""), "request.uid"),
    "unknown operation": (
        envelope(operation="PATCH"),
        "request.operation: 'PATCH' is not one of: CREATE, UPDATE, DELETE, CONNECT",
    ),
    "uid of wrong type": (envelope(uid=42), "request.uid: expected a string, found a number"),
    "kind without its kind": (envelope(kind={}), "request.kind.kind: required field missing"),
    "dryRun of wrong type": (envelope(dryRun="yes"), "request.dryRun: expected a boolean"),
    "deep nesting": (
        b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":'
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}",
        "body is nested too deeply",
    ),
    "deep nesting inside the object": (
        json.dumps(review_for({"spec": {}, "x": "NEST"}, kind="Pod"))
        .encode()
        .replace(b'"NEST"', b"[" * 5000 + b"]" * 5000),
        "nested too deeply",
    ),
}


@pytest.mark.parametrize("body,reason", BAD_BODIES.values(), ids=BAD_BODIES.keys())
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_a_body_that_is_not_a_review_gets_400_with_a_reason(
    webhook: Webhook, endpoint: str, body: bytes, reason: str
) -> None:
    resp = webhook.post(endpoint, body)
    assert resp.status_code == 400
    assert reason in resp.json()["error"]
    assert "Traceback" not in resp.text
    assert webhook.alive()


def test_a_body_over_8_mib_gets_413(webhook: Webhook) -> None:
    review = review_for({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}})
    review["request"]["object"]["metadata"] = {"annotations": {"big": "x" * (9 * 1024 * 1024)}}
    resp = webhook.post("mutate", json.dumps(review).encode())
    assert resp.status_code == 413
    assert "8388608" in resp.json()["error"]
    assert webhook.alive()


def test_a_body_just_under_the_limit_is_answered(webhook: Webhook) -> None:
    review = review_for({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}})
    review["request"]["object"]["metadata"] = {"annotations": {"big": "x" * (7 * 1024 * 1024)}}
    assert webhook.review("mutate", review).allowed


# Each holds a GPU marker: an object that could not ask for a GPU takes the fast path (below).
UNREADABLE = {
    "object is a string": ("nvidia.com/gpu: 1", "object"),
    "spec is a list": ({"spec": ["nvidia.com/gpu"]}, "spec: expected an object"),
    "containers is a string": (
        {"spec": {"containers": "nvidia.com/gpu"}},
        "spec.containers: expected a list",
    ),
    "container is a number": (
        {"spec": {"containers": [7], "nodeSelector": {"nvidia.com/gpu.product": "H100"}}},
        "spec.containers[0]: expected",
    ),
    "limits is a list": (
        {"spec": {"containers": [{"name": "a", "resources": {"limits": ["nvidia.com/gpu"]}}]}},
        "spec.containers[0].resources.limits: expected an object",
    ),
    "gpu quantity is junk": (
        {"spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "x"}}}]}},
        'spec.containers[0].resources.limits["nvidia.com/gpu"]',
    ),
    "env is an object": (
        {"spec": {"containers": [{"name": "a", "env": {"NVIDIA_VISIBLE_DEVICES": "all"}}]}},
        "spec.containers[0].env: expected a list",
    ),
    "memory limit is junk on a gpu container": (
        {
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "lots"}}}
                ]
            }
        },
        "spec.containers[0].resources.limits.memory",
    ),
}


@pytest.mark.parametrize("obj,field", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_an_object_that_cannot_be_read_is_denied_naming_the_field(
    webhook: Webhook, obj: Any, field: str
) -> None:
    mutate = webhook.review("mutate", review_for(obj, kind="Pod"))
    assert not mutate.allowed
    assert mutate.raw["status"]["code"] == 400
    assert field in mutate.message
    assert webhook.alive()


def test_a_malformed_object_that_cannot_ask_for_a_gpu_takes_the_fast_path(
    webhook: Webhook,
) -> None:
    """No GPU marker in the bytes: allowed unparsed; the apiserver's schema check refuses it."""
    for obj in ({"spec": {"containers": "web"}}, "not a pod", {"spec": []}):
        assert webhook.review("mutate", review_for(obj, kind="Pod")).allowed


def test_unknown_kinds_are_allowed_untouched(webhook: Webhook) -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"containers": "odd"}}
    for endpoint in ("mutate", "validate"):
        answer = webhook.review(endpoint, review_for(obj))
        assert answer.allowed and answer.patch == []


def test_wrong_method_and_path_are_refused(webhook: Webhook) -> None:
    assert webhook.client.get(f"{webhook.url}/mutate").status_code == 405
    assert webhook.client.post(f"{webhook.url}/nowhere", content=b"{}").status_code == 404


def _corpus_reviews() -> list[Path]:
    folder = CORPUS / "admissionreviews"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def _as_review(path: Path) -> dict[str, Any]:
    text = path.read_text()
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if data.get("kind") == "AdmissionReview":
        return dict(data)
    if "operation" in data and "uid" in data:  # a bare AdmissionRequest
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": data}
    return review_for(data, kind=str(data.get("kind", "Unknown")))  # a bare object


@pytest.mark.skipif(not _corpus_reviews(), reason="../shared/corpus/admissionreviews is absent")
@pytest.mark.parametrize("path", _corpus_reviews(), ids=lambda p: p.name[:80])
def test_third_party_admission_fixtures_get_an_answer_never_a_5xx(
    webhook: Webhook, path: Path
) -> None:
    review = _as_review(path)
    for endpoint in ("mutate", "validate"):
        resp = webhook.post(endpoint, json.dumps(review, default=str).encode())
        assert resp.status_code in (200, 400), resp.text
        if resp.status_code == 200:
            assert resp.json()["response"]["uid"] == review["request"]["uid"]
        else:
            assert resp.json()["error"]
    assert webhook.alive()


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
_WANTS = {"uid": str, "operation": str, "name": str, "namespace": str, "dryRun": bool}


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(sorted(_WANTS)), value=_JSON)
def test_a_request_field_of_the_wrong_type_is_named_in_the_reason(field: str, value: Any) -> None:
    review = review_for({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}})
    review["request"][field] = value
    try:
        decode(json.dumps(review).encode())
    except BadReview as exc:
        assert str(exc).startswith(f"not an AdmissionReview: request.{field}"), str(exc)
    else:
        assert type(value) is _WANTS[field], (field, value)
