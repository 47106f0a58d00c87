"""The webhooks' matchConditions, evaluated with a real CEL interpreter.

The conditions of the rendered base are run against objects built for every routed kind and
against the corpus, with the webhook's own pod views as the judge of which objects it must see
(the routing library these tests share: tests/support/routing.py, routingexamples.py).
"""

from __future__ import annotations

import copy

import pytest

from tests.support.manifests import NOT_ROUTED, routed
from tests.support.routing import (
    needs_webhook,
    needs_webhook_dra,
    needs_webhook_untainted,
    selects,
)
from tests.support.routingexamples import KINDS, NO_POD_SPEC, POD_SPECS, limits_spec
from webhook.engine.podviews import group_of
from webhook.engine.workloads import DEFAULT_TABLE


def test_every_routed_kind_has_an_example_here() -> None:
    built = {(group_of(make({})["apiVersion"]), make({})["kind"]) for make in KINDS.values()}
    assert built == {(w.group, w.kind) for w in DEFAULT_TABLE.kinds} - NOT_ROUTED - NO_POD_SPEC
    assert all(routed(make({})) for make in KINDS.values())


@pytest.mark.parametrize("spec_name", POD_SPECS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_match_conditions_select_exactly_the_pod_specs_the_webhook_must_see(
    kind: str, spec_name: str
) -> None:
    spec, expected = POD_SPECS[spec_name]
    obj = KINDS[kind](copy.deepcopy(spec))
    assert selects(obj) is expected
    # The example itself is right: the engine finds the pod spec where it is and acts on it
    # (or, for the few the conditions send as a cheap superset, has nothing to say).
    not_needed = SENT_BUT_NOT_NEEDED | (REACH_ONLY if kind in RUNTIMES else frozenset())
    if spec_name.startswith("dra-"):
        # With the facts, a claim of a class that hands out no GPU has nothing to answer.
        needed = expected and spec_name not in not_needed | NO_GPU_CLASS
        assert needs_webhook_dra(obj) is needed
    if spec_name in UNTAINTED_ONLY:
        # Nothing to say where GPU nodes carry a GPU taint; where one carries none, the pod
        # lands there with no toleration, and the engine judges or changes it.
        assert needs_webhook(obj) is False
        # A runtime others are merged into gets no `void`; its privileged mode is judged.
        judged = kind not in RUNTIMES or spec_name == "privileged-asks-no-gpu"
        assert needs_webhook_untainted(obj) is judged
        return
    assert needs_webhook(obj) is (expected and spec_name not in not_needed)


# Sent for clusters whose GPU nodes carry no GPU taint (the facts show them).
UNTAINTED_ONLY = frozenset(
    {
        "host-var-log",
        "host-dev-shm",
        "privileged-asks-no-gpu",
        "cuda-visible-devices",
        "hip-visible-devices",
        "rocr-visible-devices",
    }
)


# Sent because the condition stays cheap, though the engine has nothing to say about them.
SENT_BUT_NOT_NEEDED = frozenset({"visible-devices-void", "dra-claim-no-container-uses"})
# Sent because only the facts tell: without them the engine warns of a claim it cannot place;
# with them it knows the class hands out no GPU.
NO_GPU_CLASS = frozenset({"dra-claim-of-a-class-of-no-gpus"})
# Pod specs that only reach GPU nodes: in a runtime others are merged into (a container may
# get its GPU from them) the engine adds no NVIDIA_VISIBLE_DEVICES=void and warns of nothing.
REACH_ONLY = frozenset(
    {
        "tolerates-nvidia-taint",
        "tolerates-amd-taint",
        "tolerates-every-taint",
        "selects-gpu-product",
        "selects-gke-accelerator-by-affinity",
        "names-its-node",
    }
)
RUNTIMES = frozenset(
    {"ServingRuntime", "ClusterServingRuntime-worker", "TrainingRuntime", "ClusterTrainingRuntime"}
)


@pytest.mark.parametrize(
    "field",
    ["model", "pytorch", "tensorflow", "triton", "huggingface", "sklearn", "onnx"],
)
def test_kserve_models_asking_for_a_gpu_are_selected(field: str) -> None:
    predictor = {field: {"storageUri": "s3://m", "resources": {"limits": {"nvidia.com/gpu": 1}}}}
    obj = KINDS["InferenceService-predictor"](predictor)
    assert selects(obj) is True
    predictor[field]["resources"]["limits"]["nvidia.com/gpu"] = 0  # type: ignore[index]
    assert selects(obj) is False


def test_a_multi_node_kserve_predictor_is_selected_for_its_gpu_workers() -> None:
    obj = KINDS["InferenceService-predictor"](
        {"model": {"storageUri": "s3://m"}, "workerSpec": limits_spec("nvidia.com/gpu", "1")}
    )
    assert selects(obj) is True


def test_an_object_being_deleted_is_not_sent_even_when_it_asks_for_a_gpu() -> None:
    obj = KINDS["Deployment"](limits_spec("nvidia.com/gpu", "1"))
    old = copy.deepcopy(obj)
    obj["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    obj["metadata"]["finalizers"] = []
    assert selects(obj, operation="UPDATE", old=old) is False
    assert selects(old, operation="UPDATE", old=old) is True
