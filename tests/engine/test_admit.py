"""`engine.admit`: what the engine makes of one admission request, the same for every front
door. Skipped requests say why, the fast path says it looked no further, and every other
request is decided, with the subject it judged."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.paths import ROOT
from webhook.engine.admit import FAST, Decided, Request, Skipped, admit
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import Stage
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules

RULES = compile_rules(load_rules(ROOT / "rules"))
SNAPSHOT = load_snapshot(ROOT / "examples" / "cluster-snapshot.yaml")


def pod(*, gpus: int = 0, namespace: str | None = None) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    meta: dict[str, Any] = {"name": "train"}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}]},
    }


def raw(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        (Request("", "Pod", "DELETE", "ml-team", raw=raw(pod(gpus=1))), "operation DELETE"),
        (Request("", "Pod", "CONNECT", "ml-team", obj=pod(gpus=1)), "operation CONNECT"),
        (Request("", "Pod", "UPDATE", "ml-team", "status", obj=pod()), "subresource status"),
        (
            Request("", "Pod", "CREATE", "ml-team", "ephemeralcontainers", obj=pod()),
            "subresource ephemeralcontainers",
        ),
        (Request("", "ConfigMap", "CREATE", "ml-team", obj={}), "ConfigMap holds no pod spec"),
        (Request(obj={"apiVersion": "v1", "kind": "Service"}), "Service holds no pod spec"),
        (Request(obj=[]), "(no kind) holds no pod spec"),
    ],
)
def test_requests_the_engine_has_nothing_to_say_about_are_skipped_with_why(
    request_: Request, why: str
) -> None:
    assert admit(request_, RULES, SNAPSHOT) == Skipped(why)


def test_kubectl_debug_on_a_pod_is_not_skipped() -> None:
    request = Request("", "Pod", "UPDATE", "ml-team", "ephemeralcontainers", obj=pod())
    assert isinstance(admit(request, RULES), Decided)


def test_a_pod_no_rule_can_apply_to_takes_the_fast_path() -> None:
    request = Request("", "Pod", namespace="ml-team", raw=raw(pod()))
    assert admit(request, RULES) is FAST
    # Without its bytes the engine judges it in full, and finds nothing either.
    full = admit(Request("", "Pod", namespace="ml-team", obj=pod()), RULES)
    assert isinstance(full, Decided)
    assert full.decision.allowed and not full.decision.patch and not full.decision.judged


def test_a_gpu_pod_is_decided_from_its_bytes_with_the_namespace_facts() -> None:
    laps: list[str] = []
    request = Request("", "Pod", namespace="ml-team", raw=raw(pod(gpus=1)))
    outcome = admit(request, RULES, SNAPSHOT, stage=Stage.MUTATE, lap=laps.append)
    assert isinstance(outcome, Decided)
    assert outcome.subject is not None and outcome.subject.namespace == "ml-team"
    assert outcome.subject.obj == pod(gpus=1)
    assert outcome.decision.patch  # limits, tolerations, shm...
    assert laps == ["prefilter", "decode", "facts", "engine"]


def test_bytes_that_are_not_json_are_refused_naming_where() -> None:
    request = Request("", "Pod", namespace="ml-team", raw=b'{"spec": nvidia.com/gpu')
    outcome = admit(request, RULES)
    assert isinstance(outcome, Decided) and outcome.subject is None
    assert not outcome.decision.allowed
    assert outcome.decision.unreadable is not None
    assert "not readable JSON (at line 1, column 10)" in outcome.decision.unreadable.message()


def test_the_request_namespace_wins_over_the_object_and_the_fallback() -> None:
    outcome = admit(Request(namespace="team-a", obj=pod(gpus=1, namespace="team-b")), RULES)
    assert isinstance(outcome, Decided) and outcome.subject is not None
    assert outcome.subject.namespace == "team-a"
    outcome = admit(Request(obj=pod(gpus=1, namespace="team-b")), RULES)
    assert isinstance(outcome, Decided) and outcome.subject is not None
    assert outcome.subject.namespace == "team-b"
    outcome = admit(Request(obj=pod(gpus=1), fallback_namespace="audited"), RULES)
    assert isinstance(outcome, Decided) and outcome.subject is not None
    assert outcome.subject.namespace == "audited"


def test_a_cluster_scoped_kind_is_judged_in_no_namespace_whatever_it_says() -> None:
    runtime = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ClusterServingRuntime",
        "metadata": {"name": "vllm", "namespace": "ml-team"},
        "spec": {"containers": [{"name": "kserve-container", "image": "vllm"}]},
    }
    for request in (Request(obj=runtime), Request(namespace="ml-team", obj=runtime)):
        outcome = admit(request, RULES, SNAPSHOT)
        assert isinstance(outcome, Decided) and outcome.subject is not None
        assert outcome.subject.namespace == ""
