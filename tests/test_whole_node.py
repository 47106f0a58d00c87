"""A pod that fills every node it can run on may run privileged containers that ask for no GPU;
anything that leaves a node's GPUs to other tenants keeps the denial (golden cases
`whole-node-pod-*` show whole objects)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import yaml

from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import evaluate
from webhook.engine.subject import subject_for
from webhook.facts.snapshotfile import load_snapshot
from webhook.ruleset.files import load_rules

CASE = Path(__file__).resolve().parent / "golden" / "whole-node-pod-privileged-sidecar-allowed"
POD = yaml.safe_load((CASE / "input.yaml").read_text())
CLUSTER = yaml.safe_load((CASE / "cluster.yaml").read_text())


def _decide(tmp_path: Path, pod: dict[str, Any], cluster: dict[str, Any]) -> Any:
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir(exist_ok=True)
    shutil.copy(CASE / "rules.yaml", rules_dir / "rules.yaml")
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    facts = load_snapshot(tmp_path / "cluster.yaml").facts_for("ml-team")
    rules = compile_rules(load_rules(rules_dir))
    return evaluate(subject_for(pod, namespace="ml-team"), rules, facts)


def test_filling_every_node_admits_the_privileged_sidecar(tmp_path: Path) -> None:
    assert _decide(tmp_path, copy.deepcopy(POD), CLUSTER).allowed


def test_a_cordoned_node_of_more_gpus_still_counts(tmp_path: Path) -> None:
    """A cordon is lifted later, and a DaemonSet's pods run on cordoned nodes anyway."""
    cluster = copy.deepcopy(CLUSTER)
    cluster["nodes"].append(
        {
            "name": "big",
            "unschedulable": True,
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "allocatable": {"nvidia.com/gpu": "16"},
        }
    )
    decision = _decide(tmp_path, copy.deepcopy(POD), cluster)
    assert not decision.allowed
    assert "has 16 nvidia.com/gpu, the pod asks 8" in decision.message()


def test_a_pod_that_names_its_node_keeps_the_denial(tmp_path: Path) -> None:
    pod = copy.deepcopy(POD)
    pod["spec"]["nodeName"] = "a3-highgpu-8g-0"
    decision = _decide(tmp_path, pod, CLUSTER)
    assert not decision.allowed and "it names its node (nodeName)" in decision.message()
