"""DRA claims through the rules: which containers are GPU containers, tolerations, quota in
devices, schedulability of extended resources and the fast path (readers, store and parser:
test_dra.py; the builders both share: tests/support/dra.py)."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import pytest
import yaml

from tests.support.dra import (
    CLASSES,
    GPU_KEY,
    RULES,
    by_template,
    claim,
    ctr,
    decide,
    device_class,
    exactly,
    patched_tolerations,
    pod,
    snapshot,
    template,
)
from tests.support.paths import ROOT
from webhook.engine import claims
from webhook.engine.compiled import compile_rules
from webhook.engine.podviews import pod_views
from webhook.facts.snapshotfile import SnapshotFile, snapshot_from_doc
from webhook.ruleset.models import RuleSet

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
        source.facts_for("ml-team").dra,
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
