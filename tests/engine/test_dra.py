"""DRA claims as GPU asks: the readers, the store, the engine's resolution and the rules on it.

The golden cases (`tests/golden/dra-*`) show whole pods through the engine and the server;
these pin the pieces: how objects are read, which classes are GPUs, how devices are counted,
what the pod-view parser refuses, and what a claim that cannot be resolved does (nothing).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.dra import (
    GPU_KEY,
    NVIDIA,
    RULES,
    claim,
    decide,
    device_class,
    exactly,
    pod,
    snapshot,
    template,
)
from webhook.engine.podviews import UnreadableObject, pod_views
from webhook.facts import dra
from webhook.facts.snapshotfile import SnapshotError

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


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
    store.not_served("deviceclasses", 404)  # DRA not served by the cluster
    facts = store.facts_for("ml-team")
    assert facts is not None and facts.device_classes == {} and facts.templates is None
    store.not_served("deviceclasses", 403)  # not allowed: unknown again
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
    assert store.facts_for("ml-team").claim_devices == {GPU_KEY: 6}  # type: ignore[union-attr]
    store.put("resourceclaims", "ml-team", "c0", None)
    assert store.facts_for("ml-team").claim_devices == {GPU_KEY: 4}  # type: ignore[union-attr]
    taken = store.facts_for("ml-team")
    store.put(
        "resourceclaims",
        "ml-team",
        "c9",
        dra.claim_spec({"devices": {"requests": [exactly("g", "gpu.nvidia.com", 1)]}}),
    )
    assert store.facts_for("ml-team").claim_devices == {GPU_KEY: 5}  # type: ignore[union-attr]
    assert taken is not None and taken.claim_devices == {GPU_KEY: 4}  # a reader's value stays
    assert store.facts_for("other").claims == {}  # type: ignore[union-attr]


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
        # Empty, but not a list: as wrong as any other non-list (never skipped for being falsy).
        (
            {"containers": [{"name": "c", "resources": {"claims": {}}}]},
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
