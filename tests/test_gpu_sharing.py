"""Pods given part of a GPU by a GPU-sharing scheduler: what makes one, and what does not (the
golden cases `kai-*` show whole objects)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.ruleset.files import load_rules

ROOT = Path(__file__).resolve().parents[1]
RULES = compile_rules(load_rules(ROOT / "rules"))
POD = yaml.safe_load((ROOT / "tests/golden/kai-gpu-fraction-pod-admitted/input.yaml").read_text())


def _denied(pod: dict[str, Any]) -> set[str]:
    decision = evaluate(subject_for(pod, namespace="ml-team"), RULES, None)
    return {f.rule for f in decision.denials}


def _ref(pod: dict[str, Any]) -> dict[str, Any]:
    env: dict[str, Any] = pod["spec"]["containers"][0]["env"][0]
    ref: dict[str, Any] = env["valueFrom"]["configMapKeyRef"]
    return ref


def test_the_scheduler_s_own_config_map_is_admitted() -> None:
    assert _denied(copy.deepcopy(POD)) == set()


def test_a_pod_that_names_its_node_is_no_sharing_pod() -> None:
    """nodeName skips the scheduler: nothing grants the part, nothing fills the ConfigMap."""
    pod = copy.deepcopy(POD)
    pod["spec"]["nodeName"] = "gpu-node-1"
    assert "visible-devices" in _denied(pod)


def test_a_config_map_of_another_name_or_key_is_not_the_scheduler_s() -> None:
    for change in ({"name": "my-own-gpus"}, {"key": "DEVICES"}, {"optional": True}):
        pod = copy.deepcopy(POD)
        _ref(pod).update(change)
        assert "visible-devices" in _denied(pod), change


def test_without_the_scheduler_s_annotation_no_config_map_is_its() -> None:
    pod = copy.deepcopy(POD)
    del pod["metadata"]["annotations"]["runai/shared-gpu-configmap"]
    assert "visible-devices" in _denied(pod)


def test_odd_types_where_the_scheduler_reads_are_no_crash() -> None:
    for notes in (None, [], {"gpu-fraction": 5}, {"gpu-fraction-container-name": 3}):
        pod = copy.deepcopy(POD)
        pod["metadata"]["annotations"] = notes
        evaluate(subject_for(pod, namespace="ml-team"), RULES, None)  # a decision, not a crash


def _without_env(pod: dict[str, Any]) -> dict[str, Any]:
    """As the pod is before the sharing scheduler's webhook and ours have mutated it."""
    pod = copy.deepcopy(pod)
    del pod["spec"]["containers"][0]["env"]
    return pod


def test_validation_alone_requires_what_mutation_would_have_set() -> None:
    """The mutating webhooks' failurePolicy is Ignore: a shared container that reaches /validate
    unmutated, leaving NVIDIA_VISIBLE_DEVICES to its image ('all' in CUDA images), is denied."""
    pod = _without_env(POD)
    decision = evaluate(subject_for(pod, namespace="ml-team"), RULES, None, stage=Stage.VALIDATE)
    found = [f for f in decision.denials if f.rule == "visible-devices"]
    assert found, decision
    assert "'void' or the sharing scheduler's ConfigMap reference" in found[0].summary
    assert found[0].field == "spec.containers[0].env"


def test_after_mutation_the_shared_container_is_admitted() -> None:
    """Our mutation sets void until the scheduler's webhook points it at the ConfigMap."""
    decision = evaluate(subject_for(_without_env(POD), namespace="ml-team"), RULES, None)
    assert not [f for f in decision.denials if f.rule == "visible-devices"]
    assert decision.mutated is not None
    env = decision.mutated["spec"]["containers"][0]["env"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in env
