"""The routing CEL is total: any JSON at any pod-spec path evaluates to true or false.

A matchCondition that fails to evaluate makes the apiserver apply failurePolicy, and with
`Fail` that rejects the request before the webhook is called: a CRD object with a `null` or a
number where a list belongs would be refused by a webhook that never saw it. No kube-apiserver
(cel-go) runs here, so every condition is checked with two independent CEL implementations,
which must compile it, evaluate it without error and agree: the Rust-based
`common-expression-language` (`cel`) and Google's C++ CEL (`cel-expr-python`), whose type
checker also refuses what cel-go's would (a range of unknown type outside dyn()).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import cel
import pytest
from cel_expr_python import cel as cel_cpp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.manifests import ROOT, pod_webhook_entries, resource_of
from tests.support.strategies import JSON
from webhook.engine import compile_rules, evaluate, subject_for
from webhook.engine.workloads import DEFAULT_TABLE, Workload
from webhook.facts.model import Facts
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules
from webhook.ruleset.workloads import LIST_ITEMS, MAP_VALUES

RULES = compile_rules(load_rules(ROOT / "rules"))
# The judge is the engine under each kind of cluster whose facts widen what it acts on: none
# (the webhook without a source of facts), NVIDIA's DRA driver with ml-team's claim templates
# (a claim is a GPU ask only by these), and GPU nodes that carry no GPU taint (any pod may
# land there: privileged mode, hostPath and device variables are judged in every pod). There
# the engine would give every plain pod NVIDIA_VISIBLE_DEVICES=void too, which the routing
# leaves out by design (docs/gpu-pods.md): only its findings must be sent. Each cluster with
# whether a patch alone must be sent.
_GOLDEN = ROOT / "tests" / "golden"
_DRA = _GOLDEN / "dra-claim-template-pod-patched" / "cluster.yaml"
_UNTAINTED = _GOLDEN / "access-untainted-gpu-nodes-every-pod-gets-void" / "cluster.yaml"
CLUSTERS: tuple[tuple[Facts | None, bool], ...] = (
    (None, True),
    (load_snapshot(_DRA).facts_for("ml-team"), True),
    (load_snapshot(_UNTAINTED).facts_for("ml-team"), False),
)
_VARIABLES = ("object", "oldObject", "request")


@functools.cache
def _conditions() -> tuple[tuple[str, str], ...]:
    """(name, expression) of every matchCondition of both pod webhooks, each text once (the
    ConfigMap webhook's: test_sharing_config_maps.py)."""
    seen: dict[str, str] = {}
    for _, hook in pod_webhook_entries():
        for condition in hook["matchConditions"]:
            seen.setdefault(condition["expression"], condition["name"])
    return tuple((name, text) for text, name in seen.items())


@functools.cache
def _rust() -> tuple[tuple[str, Any], ...]:
    return tuple((name, cel.compile(text)) for name, text in _conditions())


@functools.cache
def _cpp() -> tuple[tuple[str, Any], ...]:
    env = cel_cpp.NewEnv(variables={v: cel_cpp.Type.DYN for v in _VARIABLES})
    return tuple((name, env.compile(text)) for name, text in _conditions())


def _request(obj: Any, operation: str) -> dict[str, Any]:
    api = obj.get("apiVersion") if isinstance(obj, dict) else None
    group, _, version = api.rpartition("/") if isinstance(api, str) else ("", "", "v1")
    kind = str(obj.get("kind", "")) if isinstance(obj, dict) else ""
    gvk = {"group": group, "version": version, "kind": kind}
    resource = {"group": group, "version": version, "resource": resource_of(kind)}
    return {
        "kind": gvk,
        "resource": resource,
        "subResource": "",
        "requestKind": gvk,
        "requestResource": resource,
        "name": "x",
        "namespace": "ml-team",
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "dryRun": False,
    }


def _both(obj: Any, old: Any, operation: str) -> dict[str, bool]:
    """Each condition's result, the same in both implementations (an error fails the test)."""
    data = {"object": obj, "oldObject": old, "request": _request(obj, operation)}
    context = cel.Context()
    for name, value in data.items():
        context.add_variable(name, value)
    results: dict[str, bool] = {}
    for (name, rust), (_, cpp) in zip(_rust(), _cpp(), strict=True):
        by_rust = rust.execute(context)
        by_cpp = cpp.eval(data=data).value()
        assert isinstance(by_rust, bool) and isinstance(by_cpp, bool), (name, by_rust, by_cpp)
        assert by_rust == by_cpp, (name, by_rust, by_cpp)
        results[name] = by_rust
    return results


# --- objects: every routed kind, a pod spec where the workload table keeps it -----------------


def _place(root: dict[str, Any], segments: tuple[str, ...], spec: dict[str, Any]) -> None:
    """Put `spec` at the path (one item for a list wildcard, key `w` for a map one)."""
    node: Any = root
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        nxt: Any = spec if last else ([] if segments[i + 1] == LIST_ITEMS else {})
        if seg == LIST_ITEMS:
            node.append(nxt)
        elif seg == MAP_VALUES:
            node["w"] = nxt
        else:
            node[seg] = nxt
        node = nxt


def _object(workload: Workload, spec: dict[str, Any]) -> dict[str, Any]:
    api = f"{workload.group}/v1" if workload.group else "v1"
    obj: dict[str, Any] = {"apiVersion": api, "kind": workload.kind, "metadata": {"name": "x"}}
    _place(obj, workload.spec_paths[0], spec)
    return obj


KINDS = [w for w in DEFAULT_TABLE.kinds if w.spec_paths]
GPU_CONTAINER = {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
PLAIN_CONTAINER = {"name": "main", "image": "x"}
# A container whose GPU comes through DRA: claim "gpu" of the pod spec (from a template of the
# DRA cluster), or the implicit resource of its GPU class.
CLAIM_CONTAINER = {"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}
GPU_CLAIMS = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
IMPLICIT_CONTAINER = {
    "name": "main",
    "image": "x",
    "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}},
}
POD_SPECS: dict[str, dict[str, Any]] = {
    "gpu": {"containers": [GPU_CONTAINER]},
    "plain": {"containers": [PLAIN_CONTAINER]},
    "dra-claim": {"containers": [CLAIM_CONTAINER], "resourceClaims": GPU_CLAIMS},
    "dra-implicit": {"containers": [IMPLICIT_CONTAINER]},
}

# Paths inside a pod spec that a condition reads, and the object's own fields.
SPEC_PATHS: list[tuple[str | int, ...]] = [
    (),
    ("containers",),
    ("containers", 0),
    ("containers", 0, "env"),
    ("containers", 0, "env", 0),
    ("containers", 0, "env", 0, "name"),
    ("containers", 0, "resources"),
    ("containers", 0, "resources", "limits"),
    ("containers", 0, "resources", "requests"),
    ("containers", 0, "resources", "limits", "nvidia.com/gpu"),
    ("containers", 0, "volumeMounts"),
    ("containers", 0, "volumeMounts", 0),
    ("containers", 0, "volumeMounts", 0, "mountPath"),
    ("containers", 0, "securityContext"),
    ("containers", 0, "securityContext", "privileged"),
    ("initContainers",),
    ("initContainers", 0, "securityContext", "privileged"),
    ("initContainers", 0),
    ("ephemeralContainers",),
    ("volumes",),
    ("volumes", 0),
    ("volumes", 0, "hostPath"),
    ("volumes", 0, "hostPath", "path"),
    ("tolerations",),
    ("tolerations", 0),
    ("tolerations", 0, "key"),
    ("tolerations", 0, "operator"),
    ("nodeSelector",),
    ("nodeSelector", "nvidia.com/gpu.product"),
    ("affinity",),
    ("affinity", "nodeAffinity"),
    ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    (
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
        0,
        "matchExpressions",
    ),
    ("nodeName",),
    ("resourceClaims",),
    ("schedulerName",),
    ("model",),
]
OBJECT_PATHS: list[tuple[str | int, ...]] = [
    ("spec",),
    ("metadata",),
    ("metadata", "deletionTimestamp"),
    ("metadata", "annotations"),
]

# Paths inside the metadata beside a pod spec (its template's, or a Pod's own).
META_PATHS: list[tuple[str | int, ...]] = [
    (),
    ("annotations",),
    ("annotations", "devices.gke.io/container.main"),
    ("annotations", "mounts.nri.io"),
]

WHERE = (
    [("spec", p) for p in SPEC_PATHS]
    + [("object", p) for p in OBJECT_PATHS]
    + [("meta", p) for p in META_PATHS]
)


def _set(root: Any, path: tuple[str | int, ...], value: Any) -> Any:
    """`root` with `value` at `path`, made reachable: what is in the way becomes a map or a
    one-item list."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        node = root if isinstance(root, list) and root else [{}]
        node = list(node)
        node[0] = _set(node[0], rest, value)
        return node
    node = dict(root) if isinstance(root, dict) else {}  # type: ignore[assignment]
    node[head] = _set(node.get(head), rest, value)  # type: ignore[attr-defined, call-overload]
    return node


def _spec_root(workload: Workload) -> tuple[str | int, ...]:
    """Where `_object` puts the pod spec, as concrete keys and indexes."""
    out: list[str | int] = []
    for seg in workload.spec_paths[0]:
        out.append(0 if seg == LIST_ITEMS else "w" if seg == MAP_VALUES else seg)
    return tuple(out)


def _needs_webhook(obj: Any, old: Any, operation: str) -> bool | None:
    """Whether the engine would change or judge the object in any of CLUSTERS; None when it
    finds the object unreadable (a CRD with the wrong types: the apiserver admits it
    unrouted, and no pod can be made of it as it stands)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
        return False
    needed = False
    for facts, patches in CLUSTERS:
        decision = evaluate(
            subject_for(obj, namespace="ml-team", operation=operation, old_obj=old), RULES, facts
        )
        if decision.unreadable is not None:
            return None
        needed = needed or bool(decision.judged) or (patches and bool(decision.patch))
    return needed


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    workload=st.sampled_from(KINDS),
    spec=st.sampled_from(list(POD_SPECS.values())),
    where=st.sampled_from(WHERE),
    value=JSON,
    operation=st.sampled_from(["CREATE", "UPDATE"]),
)
def test_any_json_anywhere_evaluates_in_both_cel_implementations_and_routes_what_we_judge(
    workload: Workload,
    spec: dict[str, Any],
    where: tuple[str, tuple[str | int, ...]],
    value: Any,
    operation: str,
) -> None:
    base = _object(workload, copy.deepcopy(spec))
    scope, path = where
    if scope == "spec":
        full = (*_spec_root(workload), *path)
    elif scope == "meta":
        full = (*_spec_root(workload)[:-1], "metadata", *path)
    else:
        full = path
    obj = _set(base, full, value)
    old = base if operation == "UPDATE" else None
    results = _both(obj, old, operation)
    needed = _needs_webhook(obj, old, operation)
    if needed and operation == "CREATE":
        # What the engine changes or judges is sent: a total condition is still a superset.
        assert all(results.values()), (results, obj)


VALUES = {
    "null": None,
    "number": 7,
    "string": "x",
    "list of null": [None],
    "map": {"a": None},
    "true": True,
}
NAMED_PATHS = {
    "env": ("containers", 0, "env"),
    "env item": ("containers", 0, "env", 0),
    "tolerations": ("tolerations",),
    "volumes": ("volumes",),
    "resources": ("containers", 0, "resources"),
    "limits": ("containers", 0, "resources", "limits"),
    "resourceClaims": ("resourceClaims",),
    "containers": ("containers",),
    "nodeSelector": ("nodeSelector",),
    "affinity": ("affinity",),
    "hostPath": ("volumes", 0, "hostPath"),
    "securityContext": ("containers", 0, "securityContext"),
    "privileged": ("containers", 0, "securityContext", "privileged"),
    "env name": ("containers", 0, "env", 0, "name"),
}


@pytest.mark.parametrize("value", VALUES.values(), ids=VALUES.keys())
@pytest.mark.parametrize("path", NAMED_PATHS.values(), ids=NAMED_PATHS.keys())
@pytest.mark.parametrize("workload", KINDS, ids=[f"{w.group}/{w.kind}" for w in KINDS])
def test_the_values_seen_in_real_crd_objects_evaluate_everywhere(
    workload: Workload, path: tuple[str | int, ...], value: Any
) -> None:
    """`env: null`, `tolerations: null`, `resourceClaims: 7`... at each path of each kind."""
    base = _object(workload, {"containers": [copy.deepcopy(PLAIN_CONTAINER)]})
    _both(_set(base, (*_spec_root(workload), *path), value), None, "CREATE")


@pytest.mark.parametrize("value", VALUES.values(), ids=VALUES.keys())
@pytest.mark.parametrize("path", META_PATHS[1:], ids=["annotations", "devices", "mounts"])
@pytest.mark.parametrize("workload", KINDS, ids=[f"{w.group}/{w.kind}" for w in KINDS])
def test_any_value_in_the_metadata_beside_a_pod_spec_evaluates_everywhere(
    workload: Workload, path: tuple[str | int, ...], value: Any
) -> None:
    """`annotations: null`, an injection annotation holding a number... beside each pod spec."""
    base = _object(workload, {"containers": [copy.deepcopy(PLAIN_CONTAINER)]})
    _both(_set(base, (*_spec_root(workload)[:-1], "metadata", *path), value), None, "CREATE")


def test_a_gpu_pod_spec_is_still_sent_and_a_plain_one_is_not() -> None:
    """The guards change nothing for well-formed objects (the cases of
    test_match_conditions.py cover the rest, kind by kind); each GPU spec is one the judge
    says must be sent."""
    for workload in KINDS:
        for name in ("gpu", "dra-claim", "dra-implicit"):
            obj = _object(workload, copy.deepcopy(POD_SPECS[name]))
            assert _needs_webhook(obj, None, "CREATE"), (workload.kind, name)
            assert all(_both(obj, None, "CREATE").values()), (workload.kind, name)
        plain = _both(
            _object(workload, {"containers": [copy.deepcopy(PLAIN_CONTAINER)]}), None, "CREATE"
        )
        assert not all(plain.values()), workload.kind


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("securityContext", {"privileged": True}),
        ("env", [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]),
        ("env", [{"name": "ROCR_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]),
    ],
)
def test_privileged_and_device_variables_are_sent_in_every_kind(field: str, value: Any) -> None:
    """What lands untolerated on an untainted GPU node goes to the webhook, whatever the kind;
    `privileged: false` does not."""
    for workload in KINDS:
        container = {**copy.deepcopy(PLAIN_CONTAINER), field: copy.deepcopy(value)}
        sent = _both(_object(workload, {"containers": [container]}), None, "CREATE")
        assert all(sent.values()), workload.kind
        off = {**copy.deepcopy(PLAIN_CONTAINER), "securityContext": {"privileged": False}}
        kept = _both(_object(workload, {"containers": [off]}), None, "CREATE")
        assert not all(kept.values()), workload.kind
