"""Writes of a GPU-sharing scheduler's device lists into ConfigMaps: the engine's rule
(`engine.sharedmaps`), and the ConfigMap webhook's matchConditions, checked in both CEL
implementations (as test_match_conditions_total.py does for the pod webhooks): total over any
JSON, and sending every write the engine refuses. The golden cases `configmap-*` show whole
requests."""

from __future__ import annotations

import copy
import functools
from typing import Any

import cel
import orjson
import pytest
from cel_expr_python import cel as cel_cpp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.manifests import ROOT, config_map_hook
from tests.support.strategies import JSON
from webhook.engine import compile_rules, evaluate, subject_for
from webhook.engine.admit import Request, admit
from webhook.engine.decision import Decision
from webhook.ruleset.files import load_rules

RULES = compile_rules(load_rules(ROOT / "rules"))
BINDER = "system:serviceaccount:kai-scheduler:binder"
OWNER = {"apiVersion": "v1", "kind": "Pod", "name": "notebook", "uid": "6b1f"}


def _config_map(name: str, data: Any, owners: Any = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml-team"}
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _decide(obj: Any, *, user: str = "alice", old: Any = None, ns: str = "ml-team") -> Decision:
    operation = "UPDATE" if old is not None else "CREATE"
    subject = subject_for(obj, namespace=ns, operation=operation, old_obj=old, user=user)
    return evaluate(subject, RULES, None)


def _denied(decision: Decision) -> bool:
    return any(f.rule == "visible-devices" for f in decision.denials)


SHARED = "notebook-x7k2p9q-shared-gpu-0"


@pytest.mark.parametrize(
    ("name", "owners"),
    [
        (SHARED, None),
        ("notebook-x7k2p9q-shared-gpu-i1", None),
        ("notebook-x7k2p9q-shared-gpu-0-evar", None),
        ("anything", [OWNER]),
    ],
)
@pytest.mark.parametrize("key", ["NVIDIA_VISIBLE_DEVICES", "RUNAI-VISIBLE-DEVICES"])
def test_a_tenant_writing_a_device_key_into_a_sharing_config_map_is_refused(
    name: str, owners: Any, key: str
) -> None:
    decision = _decide(_config_map(name, {key: "all"}, owners))
    assert _denied(decision)
    assert f"{key}='all'" in decision.message() and "'alice'" in decision.message()
    assert "gpuSharing.configMapWriters" in decision.message()


def test_the_binder_may_write_it() -> None:
    assert not _decide(_config_map(SHARED, {"NVIDIA_VISIBLE_DEVICES": "GPU-1"}), user=BINDER).judged


def test_writers_are_a_setting() -> None:
    rules = load_rules(ROOT / "rules")
    sharing = rules.gpu_sharing.model_copy(
        update={"config_map_writers": ["system:serviceaccount:runai:binder"]}
    )
    compiled = compile_rules(rules.model_copy(update={"gpu_sharing": sharing}))
    obj = _config_map(SHARED, {"NVIDIA_VISIBLE_DEVICES": "GPU-1"})
    as_runai = subject_for(obj, namespace="ml-team", user="system:serviceaccount:runai:binder")
    assert not evaluate(as_runai, compiled, None).judged
    assert evaluate(subject_for(obj, namespace="ml-team", user=BINDER), compiled, None).denials


def test_other_config_maps_and_keys_are_not_judged() -> None:
    assert not _decide(_config_map("train-env", {"NVIDIA_VISIBLE_DEVICES": "all"})).judged
    assert not _decide(_config_map(SHARED, {"GPU_PORTION": "0.5"})).judged
    # another owner kind: a Deployment's ConfigMap is not a pod's
    deployment = {**OWNER, "kind": "Deployment", "apiVersion": "apps/v1"}
    assert not _decide(_config_map("x", {"NVIDIA_VISIBLE_DEVICES": "all"}, [deployment])).judged


def test_an_update_that_leaves_the_device_keys_alone_is_not_judged() -> None:
    """Labels, the garbage collector's owner edits: the device list stays the binder's."""
    old = _config_map(SHARED, {"NVIDIA_VISIBLE_DEVICES": "GPU-1"}, [OWNER])
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "a"}
    new["metadata"]["ownerReferences"] = []
    new["data"]["GPU_PORTION"] = "0.5"
    assert not _decide(new, old=old).judged
    del new["data"]["NVIDIA_VISIBLE_DEVICES"]  # removing it hands out nothing
    assert not _decide(new, old=old).judged


def test_an_update_that_drops_the_owner_while_changing_the_key_is_still_refused() -> None:
    old = _config_map("x", {"NVIDIA_VISIBLE_DEVICES": "GPU-1"}, [OWNER])
    new = _config_map("x", {"NVIDIA_VISIBLE_DEVICES": "all"}, [])
    assert _denied(_decide(new, old=old))


def test_audits_and_exempt_namespaces_judge_no_config_map() -> None:
    """No requester, no judgement: only the webhook knows who writes."""
    obj = _config_map(SHARED, {"NVIDIA_VISIBLE_DEVICES": "all"})
    assert not _decide(obj, user="").judged
    assert not _decide(obj, ns="kube-public").judged


@pytest.mark.parametrize("key", ["NVIDIA_VISIBLE_DEVICES", "RUNAI-VISIBLE-DEVICES"])
def test_the_fast_path_never_skips_one(key: str) -> None:
    obj = _config_map(SHARED, {key: "all"})
    raw = orjson.dumps(obj)
    request = Request(
        kind="ConfigMap", operation="CREATE", namespace="ml-team", obj=None, raw=raw, user="alice"
    )
    outcome = admit(request, RULES, None)
    assert _denied(outcome.decision), outcome  # type: ignore[union-attr]


# --- the ConfigMap webhook's matchConditions, in both CEL implementations ------------------------

_VARIABLES = ("object", "oldObject", "request")


@functools.cache
def _programs() -> tuple[tuple[str, Any, Any], ...]:
    env = cel_cpp.NewEnv(variables={v: cel_cpp.Type.DYN for v in _VARIABLES})
    return tuple(
        (c["name"], cel.compile(c["expression"]), env.compile(c["expression"]))
        for c in config_map_hook()["matchConditions"]
    )


def _sent(obj: Any, old: Any, user: str) -> bool:
    operation = "UPDATE" if old is not None else "CREATE"
    request = {
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "operation": operation,
        "namespace": "ml-team",
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
    }
    data = {"object": obj, "oldObject": old, "request": request}
    context = cel.Context()
    for name, value in data.items():
        context.add_variable(name, value)
    results = []
    for name, rust, cpp in _programs():
        by_rust, by_cpp = rust.execute(context), cpp.eval(data=data).value()
        assert isinstance(by_rust, bool) and by_rust == by_cpp, (name, by_rust, by_cpp)
        results.append(by_rust)
    return all(results)


def test_the_conditions_send_the_refused_writes_and_not_the_binder_s() -> None:
    obj = _config_map(SHARED, {"NVIDIA_VISIBLE_DEVICES": "all"})
    assert _sent(obj, None, "alice")
    assert not _sent(obj, None, BINDER)
    assert not _sent(_config_map("train-env", {"NVIDIA_VISIBLE_DEVICES": "all"}), None, "alice")
    assert not _sent(_config_map(SHARED, {"GPU_PORTION": "1"}), None, "alice")
    owned = _config_map("x", {"RUNAI-VISIBLE-DEVICES": "all"}, [OWNER])
    assert _sent(owned, None, "alice")
    assert _sent(_config_map("x", {"NVIDIA_VISIBLE_DEVICES": "all"}, []), owned, "alice")


_PLACES = [("data",), ("metadata",), ("metadata", "name"), ("metadata", "ownerReferences"),
           ("metadata", "ownerReferences", 0), ("metadata", "ownerReferences", 0, "kind"),
           ("data", "NVIDIA_VISIBLE_DEVICES"), ()]  # fmt: skip


def _put(root: dict[str, Any], path: tuple[str | int, ...], value: Any) -> Any:
    if not path:
        return value
    node: Any = root
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return root


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    where=st.sampled_from(_PLACES),
    value=JSON,
    shared=st.booleans(),
    update=st.booleans(),
    user=st.sampled_from(["alice", BINDER]),
)
def test_any_json_evaluates_in_both_implementations_and_sends_what_the_engine_refuses(
    where: tuple[str | int, ...], value: Any, shared: bool, update: bool, user: str
) -> None:
    base = _config_map(SHARED if shared else "app", {"NVIDIA_VISIBLE_DEVICES": "all"}, [OWNER])
    obj = _put(copy.deepcopy(base), where, value)
    old = base if update else None
    sent = _sent(obj, old, user)
    if not isinstance(obj, dict):
        return
    if _decide(obj, user=user, old=old).judged:
        assert sent, obj
