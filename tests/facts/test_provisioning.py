"""Provisionable GPU node shapes read from the cluster: Karpenter NodePools and Cluster API
groups scaled from zero, parsed (pure) and from a snapshot (the live cache and the namespaces
read: test_provisioning_live.py)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from tests.support.provisioning import ANYWHERE, GPU_COUNT, PRODUCT, machine_group, node_pool, req
from webhook.facts.provisioning import (
    ANY_COUNT,
    KARPENTER_GPUS,
    MAX_SHAPES,
    machine_group_shapes,
    node_pool_shapes,
    provisionable_shapes,
)
from webhook.facts.snapshotfile import SnapshotFile, snapshot_from_doc

MAX = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"


# ---- Cluster API -----------------------------------------------------------------------------


def test_capi_group_with_gpu_annotations_is_one_shape() -> None:
    (shape,) = machine_group_shapes(  # type: ignore[misc]
        machine_group(
            gpu_count="4",
            gpu_type="nvidia.com/gpu",
            labels=f"{PRODUCT}=NVIDIA-L40S,pool=gpu",
            taints="nvidia.com/gpu=present:NoSchedule,spot:PreferNoSchedule,dedicated:NoExecute",
        )
    )
    assert shape.gpus == {"nvidia.com/gpu": Fraction(4)}
    assert shape.labels == {PRODUCT: "NVIDIA-L40S", "pool": "gpu"}
    assert shape.taints == (
        ("nvidia.com/gpu", "present", "NoSchedule"),
        ("dedicated", "", "NoExecute"),
    )  # PreferNoSchedule keeps no pod off
    assert shape.name == "MachineDeployment gpu-md"


@pytest.mark.parametrize("most", ["0", "", "many"])
def test_capi_group_that_may_not_grow_offers_nothing(most: str) -> None:
    group = machine_group(gpu_count="8", gpu_type="nvidia.com/gpu", **{MAX: most})
    assert machine_group_shapes(group) == ()


def test_capi_deprecated_max_size_annotation_is_read() -> None:
    group = machine_group(gpu_count="2", gpu_type="amd.com/gpu", **{MAX: ""})
    group["metadata"]["annotations"][
        "cluster.k8s.io/cluster-api-autoscaler-node-group-max-size"
    ] = "3"
    (shape,) = machine_group_shapes(group)  # type: ignore[misc]
    assert shape.gpus == {"amd.com/gpu": 2}


def test_capi_gpu_count_without_type_is_no_gpu_as_for_cluster_autoscaler() -> None:
    assert machine_group_shapes(machine_group(gpu_count="8")) == ()


def test_capi_cpu_and_memory_without_gpu_state_a_node_without_gpus() -> None:
    assert machine_group_shapes(machine_group()) == ()


def test_capi_group_that_states_no_capacity_cannot_be_told() -> None:
    """The capacity may come from the infrastructure template, which is not read."""
    assert machine_group_shapes(machine_group(cpu="", memory="")) is None


def test_capi_unreadable_gpu_count_cannot_be_told() -> None:
    assert machine_group_shapes(machine_group(gpu_count="eight", gpu_type="nvidia.com/gpu")) is None


def test_capi_propagated_template_labels_and_spec_taints_count_annotations_win() -> None:
    group = machine_group(
        gpu_count="1",
        gpu_type="nvidia.com/gpu",
        labels="node-role.kubernetes.io/gpu=yes",
        taints="gpu=annotation:NoSchedule",
    )
    group["spec"]["template"]["metadata"]["labels"] = {
        "node-role.kubernetes.io/gpu": "template",
        "node.cluster.x-k8s.io/pool": "a",
        "app": "not-propagated",
    }
    group["spec"]["template"]["spec"]["taints"] = [
        {"key": "gpu", "value": "spec", "effect": "NoSchedule"},
        {"key": "other", "effect": "NoExecute"},
    ]
    (shape,) = machine_group_shapes(group)  # type: ignore[misc]
    assert shape.labels == {"node-role.kubernetes.io/gpu": "yes", "node.cluster.x-k8s.io/pool": "a"}
    assert set(shape.taints) == {("gpu", "annotation", "NoSchedule"), ("other", "", "NoExecute")}


# ---- Karpenter -------------------------------------------------------------------------------


def test_nodepool_with_product_and_count_is_one_exact_shape() -> None:
    pool = node_pool(
        "h100",
        req(PRODUCT, "In", "NVIDIA-H100-80GB-HBM3"),
        req(GPU_COUNT, "In", "8"),
        req("karpenter.k8s.aws/instance-gpu-manufacturer", "In", "nvidia"),
        req("karpenter.sh/capacity-type", "In", "on-demand", "spot"),
        taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
    )
    (shape,) = node_pool_shapes(pool)  # type: ignore[misc]
    assert shape.gpus == {"nvidia.com/gpu": 8}
    assert shape.labels[PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    assert shape.labels["karpenter.sh/nodepool"] == "h100"
    assert "karpenter.sh/capacity-type" not in shape.labels  # several values, not a GPU label
    assert shape.taints == (("nvidia.com/gpu", "", "NoSchedule"),)


def test_nodepool_without_a_gpu_count_offers_any_count_of_karpenters_gpus() -> None:
    (shape,) = node_pool_shapes(node_pool("general"))  # type: ignore[misc]
    assert set(shape.gpus) == set(KARPENTER_GPUS)
    assert all(v == ANY_COUNT for v in shape.gpus.values())
    assert PRODUCT not in shape.labels  # Karpenter launches nothing for a product selector


def test_nodepool_in_values_of_a_gpu_label_become_one_shape_each() -> None:
    pool = node_pool("mixed", req(PRODUCT, "In", "NVIDIA-L4", "NVIDIA-L40S", "NVIDIA-L4"))
    shapes = node_pool_shapes(pool)
    assert shapes is not None
    assert sorted(s.labels[PRODUCT] for s in shapes) == ["NVIDIA-L4", "NVIDIA-L40S"]


def test_nodepool_two_gpu_keys_multiply_and_too_many_cannot_be_told() -> None:
    two = node_pool(
        "two",
        req(PRODUCT, "In", "A", "B"),
        req("karpenter.k8s.aws/instance-gpu-name", "In", "h100", "a100", "l4"),
    )
    assert len(node_pool_shapes(two) or ()) == 6
    many = [str(i) for i in range(MAX_SHAPES + 1)]
    assert node_pool_shapes(node_pool("many", req(PRODUCT, "In", *many))) is None


@pytest.mark.parametrize(
    ("op", "values", "expected"),
    [
        ("In", ("1", "4"), Fraction(4)),
        ("Lt", ("3",), Fraction(2)),
        ("Gt", ("2",), ANY_COUNT),
        ("NotIn", ("8",), ANY_COUNT),
        ("Exists", (), ANY_COUNT),
    ],
)
def test_nodepool_gpu_count_requirement(
    op: str, values: tuple[str, ...], expected: Fraction
) -> None:
    shapes = node_pool_shapes(node_pool("p", req(GPU_COUNT, op, *values)))
    assert shapes and shapes[0].gpus["nvidia.com/gpu"] == expected


@pytest.mark.parametrize(
    "requirement",
    [
        req(GPU_COUNT, "DoesNotExist"),
        req(GPU_COUNT, "In", "0"),
        req(GPU_COUNT, "Lt", "1"),
        req("karpenter.k8s.aws/instance-category", "In", "c", "m", "r"),
        req("karpenter.k8s.aws/instance-family", "In", "m5", "c7gn", "i4i"),
    ],
)
def test_nodepool_that_excludes_accelerators_offers_no_gpu(requirement: dict[str, Any]) -> None:
    assert node_pool_shapes(node_pool("cpu", requirement)) == ()


@pytest.mark.parametrize(
    "requirement",
    [
        req("karpenter.k8s.aws/instance-category", "In", "c", "g"),
        req("karpenter.k8s.aws/instance-family", "In", "m5", "p5"),
        req("karpenter.k8s.aws/instance-family", "In", "inf2"),
        req("karpenter.k8s.aws/instance-category", "NotIn", "g", "p"),  # only In narrows here
    ],
)
def test_nodepool_that_allows_an_accelerated_family_may_offer_gpus(
    requirement: dict[str, Any],
) -> None:
    assert node_pool_shapes(node_pool("any", requirement))


def test_nodepool_manufacturer_names_the_resource() -> None:
    amd = node_pool("amd", req("karpenter.k8s.aws/instance-gpu-manufacturer", "In", "amd"))
    assert set(node_pool_shapes(amd)[0].gpus) == {"amd.com/gpu"}  # type: ignore[index]
    odd = node_pool("odd", req("karpenter.k8s.aws/instance-gpu-manufacturer", "In", "newco"))
    assert set(node_pool_shapes(odd)[0].gpus) == set(KARPENTER_GPUS)  # type: ignore[index]


def test_nodepool_limits_cap_a_node_and_zero_allows_none() -> None:
    capped = node_pool("capped", req(GPU_COUNT, "In", "8"), limits={"nvidia.com/gpu": "4"})
    assert node_pool_shapes(capped)[0].gpus["nvidia.com/gpu"] == 4  # type: ignore[index]
    nvidia_none = node_pool(
        "none",
        req("karpenter.k8s.aws/instance-gpu-manufacturer", "In", "nvidia"),
        limits={"nvidia.com/gpu": 0, "cpu": "1000"},
    )
    assert node_pool_shapes(nvidia_none) == ()
    no_nodes = node_pool("off", limits={"cpu": "0"})
    assert node_pool_shapes(no_nodes) == ()


def test_nodepool_template_label_is_a_label_and_satisfies_exists() -> None:
    pool = node_pool("l", req(PRODUCT, "Exists"), labels={PRODUCT: "NVIDIA-A10G", "team": "ml"})
    (shape,) = node_pool_shapes(pool)  # type: ignore[misc]
    assert shape.labels[PRODUCT] == "NVIDIA-A10G"
    assert shape.labels["team"] == "ml"


@pytest.mark.parametrize("op", ["Exists", "NotIn", "Gt"])
def test_nodepool_open_value_on_a_gpu_label_cannot_be_told(op: str) -> None:
    values = () if op == "Exists" else ("1",)
    assert node_pool_shapes(node_pool("open", req("nvidia.com/gpu.memory", op, *values))) is None


def test_nodepool_open_value_on_other_keys_is_left_out() -> None:
    pool = node_pool(
        "o",
        req("karpenter.k8s.aws/instance-gpu-memory", "Gt", "40000"),
        req("karpenter.k8s.aws/instance-generation", "Gt", "4"),
    )
    (shape,) = node_pool_shapes(pool)  # type: ignore[misc]
    assert "karpenter.k8s.aws/instance-gpu-memory" not in shape.labels


@pytest.mark.parametrize(
    "broken",
    [
        {"spec": {"template": {"spec": {"requirements": "gpu"}}}},
        {"spec": {"template": {"spec": {"requirements": [{"operator": "In"}]}}}},
        {"spec": {"limits": {"nvidia.com/gpu": "lots"}}},
        {"spec": {"template": {"spec": {"requirements": [req(GPU_COUNT, "In", "x")]}}}},
    ],
)
def test_unreadable_nodepool_cannot_be_told(broken: dict[str, Any]) -> None:
    assert node_pool_shapes({"metadata": {"name": "b"}, **broken}) is None


def test_all_sources_together() -> None:
    pools = [node_pool("h100", req(PRODUCT, "In", "H100"), req(GPU_COUNT, "In", "8"))]
    groups = [machine_group(gpu_count="1", gpu_type="nvidia.com/gpu", labels=f"{PRODUCT}=L4")]
    shapes = provisionable_shapes(pools, groups, None)
    assert shapes is not None
    assert sorted(s.labels[PRODUCT] for s in shapes) == ["H100", "L4"]
    assert provisionable_shapes(None, None, None) is None  # nothing read: unknown
    assert provisionable_shapes([], None, None) == ()  # read, and nothing offers a GPU
    assert provisionable_shapes([*pools, {"spec": {"limits": "x"}}], [], []) is None
    assert provisionable_shapes(["not an object"], [], []) is None  # type: ignore[list-item]


# ---- the snapshot file -----------------------------------------------------------------------


def snapshot(**sections: Any) -> Any:
    doc = {"apiVersion": "gpu-admission.io/v1", "kind": "ClusterSnapshot", **sections}
    return snapshot_from_doc(SnapshotFile.model_validate(doc)).facts_for("ml-team")


def test_snapshot_without_autoscaler_sections_leaves_provisioning_unknown() -> None:
    assert snapshot().provisionable is None


def test_snapshot_sections_are_read_as_objects() -> None:
    facts = snapshot(
        nodePools=[node_pool("l4", req(PRODUCT, "In", "NVIDIA-L4"), req(GPU_COUNT, "In", "1"))],
        machineDeployments=[machine_group(gpu_count="8", gpu_type="nvidia.com/gpu")],
    )
    assert facts.provisionable is not None
    shapes = facts.provisionable.shapes(ANYWHERE) or ()
    assert sorted(dict(s.gpus)["nvidia.com/gpu"] for s in shapes) == [1, 8]


def test_snapshot_empty_section_is_known_and_offers_nothing() -> None:
    empty = snapshot(machineSets=[]).provisionable
    assert empty is not None and empty.shapes(ANYWHERE) == ()
    pool = machine_group("p", kind="MachinePool", gpu_count="4", gpu_type="amd.com/gpu")
    found = snapshot(machinePools=[pool]).provisionable
    assert found is not None
    (shape,) = found.shapes(ANYWHERE) or [None]
    assert shape is not None
    assert shape.name == "MachinePool p" and dict(shape.gpus) == {"amd.com/gpu": 4}
