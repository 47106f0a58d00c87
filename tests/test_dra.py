"""DRA claims as GPU asks: the readers, the store, the engine's resolution and the rules on it.

The golden cases (`tests/golden/dra-*`) show whole pods through the engine and the server;
these pin the pieces: how objects are read, which classes are GPUs, how devices are counted,
what the pod-view parser refuses, and what a claim that cannot be resolved does (nothing).
"""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.engine import claims
from webhook.engine.compiled import compile_rules
from webhook.engine.decision import Decision
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.podviews import UnreadableObject, pod_views
from webhook.engine.subject import subject_for
from webhook.facts import dra
from webhook.facts.snapshotfile import SnapshotError, SnapshotFile, snapshot_from_doc
from webhook.ruleset.files import load_rules
from webhook.ruleset.models import RuleSet

ROOT = Path(__file__).resolve().parent.parent
GPU_KEY = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def device_class(name: str, *expressions: str, extended: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def exactly(name: str, cls: str, count: int | None = 1) -> dict[str, Any]:
    ask: dict[str, Any] = {"deviceClassName": cls}
    if count is None:
        ask["allocationMode"] = "All"
    else:
        ask["count"] = count
    return {"name": name, "exactly": ask}


def template(name: str, *requests: dict[str, Any], ns: str = "ml-team") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def claim(name: str, *requests: dict[str, Any], owner: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml-team"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner, "uid": "u", "controller": True}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": list(requests)}},
    }


NVIDIA = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
CLASSES = [
    device_class("gpu.nvidia.com", NVIDIA),
    device_class("h100-training", 'device.driver == "gpu.nvidia.com"'),  # a custom GPU class
    device_class("imex.nvidia.com", "device.driver == 'compute-domain.nvidia.com'"),
    device_class("nic.example.com", "device.driver == 'dra.net'"),
]


def snapshot(
    classes: list[dict[str, Any]] | None = CLASSES,
    templates: list[dict[str, Any]] | None = None,
    claims_: list[dict[str, Any]] | None = None,
    quotas: list[dict[str, Any]] | None = None,
) -> Any:
    doc: dict[str, Any] = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "namespaces": {"ml-team": {"labels": {}}},
        "nodes": [
            {
                "name": "h100",
                "labels": {"nvidia.com/gpu.product": "H100"},
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                "allocatable": {"nvidia.com/gpu": 8},
            }
        ],
        "resourceQuotas": quotas or [],
        "deviceClasses": classes,
        "resourceClaimTemplates": templates,
        "resourceClaims": claims_,
    }
    return snapshot_from_doc(SnapshotFile.model_validate(doc))


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": list(containers), **spec},
    }


def ctr(name: str = "main", *refs: dict[str, str], memory: str = "8Gi") -> dict[str, Any]:
    res: dict[str, Any] = {"limits": {"memory": memory}}
    if refs:
        res["claims"] = list(refs)
    return {"name": name, "image": "cuda:12", "resources": res}


def by_template(name: str, tpl: str) -> dict[str, str]:
    return {"name": name, "resourceClaimTemplateName": tpl}


RULES = compile_rules(load_rules(ROOT / "rules"))


def decide(obj: dict[str, Any], source: Any, rules: Any = RULES) -> Decision:
    facts = source.facts_for("ml-team") if source is not None else None
    return evaluate(subject_for(obj, namespace="ml-team"), rules, facts, stage=Stage.ADMIT)


def patched_tolerations(decision: Decision) -> list[str]:
    return [
        t["key"]
        for op in decision.patch
        if op["path"].endswith("/tolerations")
        for t in op["value"]
    ]


# ---- readers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "drivers"),
    [
        (NVIDIA, ("gpu.nvidia.com",)),
        ('device.driver == "gpu.amd.com"', ("gpu.amd.com",)),
        ("'gpu.intel.com' == device.driver", ("gpu.intel.com",)),
        (
            "device.driver=='a.example.com' || device.driver == 'b.example.com'",
            ("a.example.com", "b.example.com"),
        ),
        ("device.driver != 'gpu.nvidia.com'", ()),  # not a requirement
        ("device.attributes['gpu.nvidia.com'].type == 'gpu'", ()),  # an attribute, no driver
    ],
)
def test_the_drivers_a_class_requires_are_read_from_its_cel(
    expression: str, drivers: tuple[str, ...]
) -> None:
    assert dra.drivers_in(expression) == drivers


def test_a_device_class_keeps_drivers_of_every_selector_and_its_extended_resource() -> None:
    obj = device_class("x", NVIDIA, "device.driver == 'gpu.nvidia.com'", extended="example.com/gpu")
    assert dra.device_class(obj) == dra.DeviceClass("x", ("gpu.nvidia.com",), "example.com/gpu")


def test_claim_specs_read_exactly_first_available_and_the_v1beta1_shape() -> None:
    spec = dra.claim_spec(
        {
            "devices": {
                "requests": [
                    exactly("one", "gpu.nvidia.com"),
                    {"name": "default-count", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
                    exactly("all", "gpu.nvidia.com", None),
                    {
                        "name": "pick",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 2},
                            {"name": "small", "deviceClassName": "mig.nvidia.com"},
                        ],
                    },
                    {"name": "beta", "deviceClassName": "gpu.amd.com", "count": 3},
                    {"name": "no-class", "exactly": {"count": 2}},  # nothing to count: skipped
                ]
            }
        }
    )
    assert [(r.name, r.alternatives, r.first_available) for r in spec] == [
        ("one", (dra.DeviceAsk("gpu.nvidia.com", 1),), False),
        ("default-count", (dra.DeviceAsk("gpu.nvidia.com", 1),), False),
        ("all", (dra.DeviceAsk("gpu.nvidia.com", None),), False),
        (
            "pick",
            (dra.DeviceAsk("gpu.nvidia.com", 2), dra.DeviceAsk("mig.nvidia.com", 1)),
            True,
        ),
        ("beta", (dra.DeviceAsk("gpu.amd.com", 3),), False),
    ]


def test_devices_are_counted_as_resource_quota_counts_them() -> None:
    spec = dra.claim_spec(
        {
            "devices": {
                "requests": [
                    exactly("a", "gpu.nvidia.com", 2),
                    exactly("b", "gpu.nvidia.com", None),
                    {
                        "name": "c",
                        "firstAvailable": [
                            {"name": "x", "deviceClassName": "gpu.nvidia.com", "count": 4},
                            {"name": "y", "deviceClassName": "gpu.nvidia.com", "count": 1},
                            {"name": "z", "deviceClassName": "mig.nvidia.com", "count": 2},
                        ],
                    },
                ]
            }
        }
    )
    # firstAvailable: the largest alternative of each class; All: what the caller says.
    assert dra.devices_of(spec, all_as=32) == {
        GPU_KEY: 2 + 32 + 4,
        "mig.nvidia.com.deviceclass.resource.k8s.io/devices": 2,
    }
    assert dra.devices_of(spec, all_as=1)[GPU_KEY] == 2 + 1 + 4


any_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
request_like = st.fixed_dictionaries(
    {},
    optional={
        "name": any_json,
        "exactly": any_json
        | st.fixed_dictionaries(
            {},
            optional={"deviceClassName": any_json, "count": any_json, "allocationMode": any_json},
        ),
        "firstAvailable": any_json
        | st.lists(
            st.fixed_dictionaries({}, optional={"deviceClassName": any_json, "count": any_json}),
            max_size=3,
        ),
        "deviceClassName": any_json,
    },
)


@SETTINGS
@given(
    st.one_of(
        any_json,
        st.fixed_dictionaries(
            {
                "devices": st.fixed_dictionaries(
                    {"requests": st.lists(request_like, max_size=4) | any_json}
                )
            }
        ),
    )
)
def test_claim_specs_never_fail_on_what_a_snapshot_or_the_api_may_hold(spec: Any) -> None:
    """The readers take whatever arrives (a hand-written snapshot, a newer API): what cannot
    be read is left out, never an exception, and every count is a positive int or All."""
    for request in dra.claim_spec(spec):
        for ask in request.alternatives:
            assert ask.device_class and isinstance(ask.device_class, str)
            assert ask.count is None or (isinstance(ask.count, int) and ask.count >= 1)
    dra.device_class({"metadata": spec, "spec": spec})


# ---- the store --------------------------------------------------------------------------


def test_the_store_knows_nothing_until_listed_and_a_404_is_known_empty() -> None:
    store = dra.DraCache()
    assert store.facts_for("ml-team") is None
    store.not_served("deviceclasses", forbidden=False)  # DRA not served by the cluster
    facts = store.facts_for("ml-team")
    assert facts is not None and facts.device_classes == {} and facts.templates is None
    store.not_served("deviceclasses", forbidden=True)  # not allowed: unknown again
    assert store.facts_for("ml-team") is None


def test_claims_in_the_store_keep_the_namespace_device_total_up_to_date() -> None:
    store = dra.DraCache()
    store.replace(
        "resourceclaims",
        [
            dra.reduce("resourceclaims", claim(f"c{i}", exactly("g", "gpu.nvidia.com", 2)))
            for i in range(3)
        ],
    )
    assert store.facts_for("ml-team").claim_devices == {GPU_KEY: 6}
    store.put("resourceclaims", "ml-team", "c0", None)
    assert store.facts_for("ml-team").claim_devices == {GPU_KEY: 4}
    taken = store.facts_for("ml-team")
    store.put(
        "resourceclaims",
        "ml-team",
        "c9",
        dra.claim_spec({"devices": {"requests": [exactly("g", "gpu.nvidia.com", 1)]}}),
    )
    assert store.facts_for("ml-team").claim_devices == {GPU_KEY: 5}
    assert taken is not None and taken.claim_devices == {GPU_KEY: 4}  # a reader's value stays
    assert store.facts_for("other").claims == {}


def test_a_snapshot_claim_object_without_a_namespace_is_refused_naming_it() -> None:
    with pytest.raises(SnapshotError, match=r"resourceClaimTemplates\[0\]\.metadata\.namespace"):
        snapshot(templates=[template("t", exactly("g", "gpu.nvidia.com"), ns="")])


# ---- the pod-view parser -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"resourceClaims": {"name": "gpu"}}, "spec.resourceClaims"),
        ({"resourceClaims": ["gpu"]}, "spec.resourceClaims[0]"),
        ({"resourceClaims": [{"name": 7}]}, "spec.resourceClaims[0].name"),
        (
            {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": ["t"]}]},
            "spec.resourceClaims[0].resourceClaimTemplateName",
        ),
        (
            {"resourceClaims": [{"name": "g", "resourceClaimName": {}}]},
            "spec.resourceClaims[0].resourceClaimName",
        ),
        (
            {"containers": [{"name": "c", "resources": {"claims": "gpu"}}]},
            "spec.containers[0].resources.claims",
        ),
        (
            {"containers": [{"name": "c", "resources": {"claims": [{"name": "g", "request": 1}]}}]},
            "spec.containers[0].resources.claims[0].request",
        ),
        (
            {"initContainers": [{"name": "c", "resources": {"claims": [None]}}]},
            "spec.initContainers[0].resources.claims[0]",
        ),
    ],
)
def test_claims_of_impossible_types_are_refused_naming_the_field(
    spec: dict[str, Any], field: str
) -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [], **spec}}
    with pytest.raises(UnreadableObject) as err:
        pod_views(obj, group="", kind="Pod", is_gpu=RULES.base.is_gpu)
    assert err.value.path == field
    decision = decide(obj, snapshot())
    assert not decision.allowed and decision.unreadable is not None
    assert decision.unreadable.path == field


claim_entry = st.fixed_dictionaries(
    {},
    optional={
        "name": any_json,
        "resourceClaimTemplateName": any_json,
        "resourceClaimName": any_json,
    },
)
ref_entry = st.fixed_dictionaries({}, optional={"name": any_json, "request": any_json})


@SETTINGS
@given(
    st.one_of(any_json, st.lists(claim_entry | any_json, max_size=3)),
    st.one_of(any_json, st.lists(ref_entry | any_json, max_size=3)),
)
def test_any_claims_are_read_or_refused_at_their_field_never_a_crash(
    pod_claims: Any, refs: Any
) -> None:
    """Whatever the claim fields hold, the engine reads them or refuses the object naming a
    field inside them; with facts that resolve a GPU template it decides as usual."""
    obj = pod(
        {"name": "c", "resources": {"claims": refs}},
        resourceClaims=pod_claims,
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
    )
    source = snapshot(templates=[template("t", exactly("g", "gpu.nvidia.com"))])
    decision = decide(copy.deepcopy(obj), source)
    if decision.unreadable is not None:
        assert decision.unreadable.path.startswith(
            ("spec.resourceClaims", "spec.containers[0].resources.claims")
        )
        return
    views = pod_views(obj, group="", kind="Pod", is_gpu=RULES.base.is_gpu)
    names = {c[0] for c in views[0].resource_claims}
    given_names = [c.get("name") for c in pod_claims or [] if isinstance(c, dict)]
    assert names <= set(given_names)
    assert all(isinstance(n, str) and n for n in names)


# ---- which containers are GPU containers -------------------------------------------------


def test_a_container_is_a_gpu_container_only_through_the_requests_it_uses() -> None:
    source = snapshot(
        templates=[
            template("mixed", exactly("gpu", "gpu.nvidia.com"), exactly("nic", "nic.example.com"))
        ]
    )
    obj = pod(
        ctr("trainer", {"name": "c", "request": "gpu"}),
        ctr("net", {"name": "c", "request": "nic"}),
        ctr("all", {"name": "c"}),  # no request: every request of the claim
        resourceClaims=[by_template("c", "mixed")],
    )
    views = claims.resolve(
        pod_views(obj, group="", kind="Pod", is_gpu=RULES.base.is_gpu),
        RULES.base,
        source.facts_for("ml-team"),
    )
    assert [(c.name, c.asks_gpu, c.gpu_classes) for c in views[0].containers] == [
        ("trainer", True, ("gpu.nvidia.com",)),
        ("net", False, ()),
        ("all", True, ("gpu.nvidia.com",)),
    ]
    decision = decide(obj, source)
    void = [op["path"] for op in decision.patch if op["path"].endswith("/env")]
    assert void == ["/spec/containers/1/env"]  # only the NIC container gets void


@pytest.mark.parametrize(
    ("classes", "cls", "gpu"),
    [
        (CLASSES, "gpu.nvidia.com", True),  # by name (and driver)
        (CLASSES, "h100-training", True),  # a custom class: by the driver it requires
        (CLASSES, "imex.nvidia.com", False),  # NVIDIA, but IMEX channels
        (CLASSES, "mig.nvidia.com", None),  # a GPU name the cluster does not have: unknown
        (None, "mig.nvidia.com", True),  # classes unknown: the name tells
        (None, "h100-training", None),  # classes unknown, a name that says nothing
    ],
)
def test_which_device_classes_are_gpus(
    classes: list[dict[str, Any]] | None, cls: str, gpu: bool | None
) -> None:
    facts = snapshot(classes=classes, templates=[]).facts_for("ml-team")
    assert claims.gpu_class(cls, RULES.base, facts.dra) is gpu


def test_a_custom_gpu_class_gets_its_drivers_toleration() -> None:
    source = snapshot(templates=[template("h100", exactly("g", "h100-training"))])
    decision = decide(
        pod(ctr("m", {"name": "c"}), resourceClaims=[by_template("c", "h100")]), source
    )
    assert patched_tolerations(decision) == ["nvidia.com/gpu"]


def test_a_class_serving_an_extended_resource_follows_that_resources_toleration() -> None:
    """A rule file written before DRA (tolerations by resource only) still tolerates the GPU
    taint for a class whose extendedResourceName is one of the toleration's resources."""
    rules = compile_rules(
        RuleSet.model_validate(
            {
                "rules": {
                    "gpu-tolerations": {
                        "tolerations": [
                            {"resources": ["example.com/gpu"], "key": "example.com/gpu"}
                        ]
                    }
                }
            }
        )
    )
    classes = [
        device_class(
            "gpu.example.com", "device.driver == 'gpu.nvidia.com'", extended="example.com/gpu"
        )
    ]
    source = snapshot(classes=classes, templates=[template("t", exactly("g", "gpu.example.com"))])
    obj = pod(ctr("m", {"name": "c"}), resourceClaims=[by_template("c", "t")])
    assert patched_tolerations(decide(obj, source, rules)) == ["example.com/gpu"]


def test_a_toleration_needs_something_to_be_asked_for() -> None:
    with pytest.raises(ValueError, match="resources, deviceClasses or drivers"):
        RuleSet.model_validate(
            {"rules": {"gpu-tolerations": {"tolerations": [{"key": "nvidia.com/gpu"}]}}}
        )


@pytest.mark.parametrize(
    ("templates", "warned"),
    [
        ([], False),  # the template is not known: it may be a GPU claim
        (None, False),  # templates unknown
        ([template("t", exactly("x", "imex.nvidia.com"))], True),  # known, no GPU: squatting
        ([template("t", exactly("x", "fpga.example.com"))], False),  # class unknown
    ],
)
def test_a_gpu_toleration_beside_claims_is_warned_only_when_no_claim_can_be_a_gpu(
    templates: list[dict[str, Any]] | None, warned: bool
) -> None:
    obj = pod(
        ctr("m", {"name": "c"}),
        resourceClaims=[by_template("c", "t")],
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    decision = decide(obj, snapshot(templates=templates))
    assert ("gpu-toleration-without-gpu" in {f.rule for f in decision.warnings}) is warned


# ---- quota and schedulability ------------------------------------------------------------


def quota(hard: int, used: int, key: str = GPU_KEY) -> dict[str, Any]:
    return {"namespace": "ml-team", "name": "q", "hard": {key: hard}, "used": {key: used}}


def test_all_is_charged_as_resource_quota_charges_it_and_said_so() -> None:
    source = snapshot(
        templates=[template("every", exactly("g", "gpu.nvidia.com", None))],
        quotas=[quota(16, 0)],
    )
    decision = decide(
        pod(ctr("m", {"name": "c"}), resourceClaims=[by_template("c", "every")]), source
    )
    assert {f.rule for f in decision.denials} == {"gpu-quota"}
    assert "this asks 32 (allocationMode All is charged as 32 devices)" in decision.message()


def test_first_available_is_charged_its_largest_alternative() -> None:
    pick = {
        "name": "g",
        "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
            {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 1},
        ],
    }
    source = snapshot(templates=[template("t", pick)], quotas=[quota(8, 5)])
    decision = decide(pod(ctr("m", {"name": "c"}), resourceClaims=[by_template("c", "t")]), source)
    assert "3 are used" not in decision.message()
    assert "8 and 5 are used; this asks 4" in decision.message()


def test_a_named_claim_is_counted_where_it_is_never_again_per_pod() -> None:
    source = snapshot(
        templates=[],
        claims_=[claim("shared", exactly("g", "gpu.nvidia.com", 4))],
        quotas=[quota(4, 4)],
    )
    obj = pod(
        ctr("m", {"name": "c"}), resourceClaims=[{"name": "c", "resourceClaimName": "shared"}]
    )
    decision = decide(obj, source)
    assert decision.allowed
    assert "gpu-quota" not in {f.rule for f in (*decision.denials, *decision.warnings)}
    assert patched_tolerations(decision) == ["nvidia.com/gpu"]  # and still a GPU pod
    assert decision.hold is None  # nothing new to hold


def test_an_admitted_pod_holds_its_template_claims_devices() -> None:
    source = snapshot(templates=[template("t", exactly("g", "gpu.nvidia.com", 2))])
    decision = decide(pod(ctr("m", {"name": "c"}), resourceClaims=[by_template("c", "t")]), source)
    assert decision.hold is not None and decision.hold.gpus == {GPU_KEY: Fraction(2)}


def test_a_gpu_class_quota_key_counts_as_a_gpu_quota() -> None:
    rules = compile_rules(RuleSet.model_validate({"rules": {"gpu-quota": {"requireQuota": True}}}))
    obj = pod(ctr("m", {"name": "c"}), resourceClaims=[by_template("c", "t")])
    tpl = [template("t", exactly("g", "gpu.nvidia.com"))]
    missing = decide(obj, snapshot(templates=tpl), rules)
    assert f"ResourceQuota with {GPU_KEY} in ml-team" in missing.message()
    assert decide(obj, snapshot(templates=tpl, quotas=[quota(4, 0)]), rules).allowed


def test_without_the_device_class_the_extended_resource_never_schedules() -> None:
    """The control of golden case dra-device-class-extended-resource-schedulable."""
    case = ROOT / "tests" / "golden" / "dra-device-class-extended-resource-schedulable"
    doc = yaml.safe_load((case / "cluster.yaml").read_text())
    rules = compile_rules(RuleSet.model_validate(yaml.safe_load((case / "rules.yaml").read_text())))
    obj = yaml.safe_load((case / "input.yaml").read_text())
    assert decide(obj, snapshot_from_doc(SnapshotFile.model_validate(doc)), rules).allowed
    for cls in doc["deviceClasses"]:
        cls["spec"].pop("extendedResourceName", None)
    denied = decide(obj, snapshot_from_doc(SnapshotFile.model_validate(doc)), rules)
    assert "no node, existing or provisionable, offers nvidia.com/gpu" in denied.message()


# ---- the fast path -----------------------------------------------------------------------


def test_objects_with_resource_claims_never_take_the_fast_path() -> None:
    obj = pod(
        {"name": "c", "image": "x", "resources": {"claims": [{"name": "g"}]}},
        resourceClaims=[by_template("g", "t")],
    )
    assert RULES.might_apply(json.dumps(obj, separators=(",", ":")).encode())
    plain = pod({"name": "c", "image": "nginx"})
    assert not RULES.might_apply(json.dumps(plain, separators=(",", ":")).encode())
