"""Pods given part of a GPU by a GPU-sharing scheduler: what makes one, and what does not (the
golden cases `kai-*` show whole objects)."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.support.paths import ROOT
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.facts.model import Facts, NodeIndex, Usage
from webhook.facts.objects import config_map_keys
from webhook.facts.static import StaticSnapshot
from webhook.ruleset.files import load_rules

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
    """A decision, not a crash nor an unreadable object: annotations that name no
    scheduler's ConfigMap make no sharing pod, so the ConfigMap's device list is denied."""
    for notes in (None, [], {"gpu-fraction": 5}, {"gpu-fraction-container-name": 3}):
        pod = copy.deepcopy(POD)
        pod["metadata"]["annotations"] = notes
        decision = evaluate(subject_for(pod, namespace="ml-team"), RULES, None)
        assert decision.unreadable is None, notes
        assert {f.rule for f in decision.denials} == {"visible-devices"}, notes


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


# --- the keys and names KAI's releases use ----------------------------------------------------


def test_each_kai_release_s_device_key_is_admitted() -> None:
    """NVIDIA_VISIBLE_DEVICES since v0.7.4, RUNAI-VISIBLE-DEVICES before (and in the v0.4 to
    v0.6 lines): KAI's pkg/binder/common/gpu_access.go at each tag."""
    for key in ("NVIDIA_VISIBLE_DEVICES", "RUNAI-VISIBLE-DEVICES"):
        pod = copy.deepcopy(POD)
        _ref(pod)["key"] = key
        assert _denied(pod) == set(), key


def test_other_keys_of_the_scheduler_s_config_map_are_not_device_keys() -> None:
    """The same ConfigMap holds GPU_PORTION and RUNAI_NUM_OF_GPUS: no device list."""
    for key in ("GPU_PORTION", "RUNAI_NUM_OF_GPUS", "runai-visible-devices", "VISIBLE_DEVICES"):
        pod = copy.deepcopy(POD)
        _ref(pod)["key"] = key
        assert "visible-devices" in _denied(pod), key


def test_only_the_config_map_named_for_that_container_is_the_scheduler_s() -> None:
    """`<prefix>-<n>` for containers[n], `<prefix>-i<n>` for initContainers[n]: another
    container's, the envFrom one (`-evar`) or a longer name are not this container's."""
    prefix = POD["metadata"]["annotations"]["runai/shared-gpu-configmap"]
    for name in (f"{prefix}-1", f"{prefix}-i0", f"{prefix}-0-evar", f"{prefix}-00", prefix):
        pod = copy.deepcopy(POD)
        _ref(pod)["name"] = name
        assert "visible-devices" in _denied(pod), name


def test_a_shared_init_container_takes_its_own_config_map() -> None:
    pod = copy.deepcopy(POD)
    shared = pod["spec"]["containers"].pop(0)
    pod["spec"]["initContainers"] = [shared]
    pod["metadata"]["annotations"]["gpu-fraction-container-name"] = shared["name"]
    prefix = pod["metadata"]["annotations"]["runai/shared-gpu-configmap"]
    for env in shared["env"]:
        env["valueFrom"]["configMapKeyRef"]["name"] = f"{prefix}-i0"
    assert "visible-devices" not in _denied(pod)
    for env in shared["env"]:
        env["valueFrom"]["configMapKeyRef"]["name"] = f"{prefix}-0"
    assert "visible-devices" in _denied(pod)


# --- a ConfigMap already there when the pod is created -----------------------------------------


def _facts(config_maps: dict[str, dict[str, str]] | None) -> Facts:
    return Facts(
        namespace="ml-team",
        namespace_labels={},
        quotas=(),
        usage=Usage(),
        priority_classes={},
        nodes=NodeIndex(),
        config_maps=config_maps,
    )


def _with(config_maps: dict[str, dict[str, str]] | None, operation: str = "CREATE") -> set[str]:
    subject = subject_for(copy.deepcopy(POD), namespace="ml-team", operation=operation)
    decision = evaluate(subject, RULES, _facts(config_maps))
    return {f.rule for f in decision.denials}


def test_a_config_map_the_facts_show_before_the_pod_is_refused_whatever_its_value() -> None:
    """The binder writes it only at bind time, after the pod exists: not the binder's."""
    name = _ref(POD)["name"]
    for data in ({"NVIDIA_VISIBLE_DEVICES": "all"}, {"RUNAI-VISIBLE-DEVICES": "GPU-1"}):
        assert "visible-devices" in _with({name: data}), data


def test_no_such_config_map_or_unknown_ones_admit_the_pod() -> None:
    assert "visible-devices" not in _with({})
    assert "visible-devices" not in _with(
        {"someone-else-shared-gpu-0": {"NVIDIA_VISIBLE_DEVICES": "all"}}
    )
    assert "visible-devices" not in _with(None)  # not listed: the ConfigMap webhook guards writes


def test_the_cluster_facts_keep_the_older_device_key_and_nothing_else_of_the_map() -> None:
    """Live cache and snapshot alike: RUNAI-VISIBLE-DEVICES is kept (a ConfigMap holding only
    it is one a pre-v0.7.4 pod names), the scheduler's other keys are not."""
    data = {"RUNAI-VISIBLE-DEVICES": "GPU-1", "RUNAI_NUM_OF_GPUS": "0.5", "GPU_PORTION": "0.5"}
    assert config_map_keys({"data": data}) == {"RUNAI-VISIBLE-DEVICES": "GPU-1"}
    name = _ref(POD)["name"]
    snapshot = StaticSnapshot(
        namespaces={},
        nodes=(),
        quotas=(),
        priority_classes=(),
        pods=(),
        config_maps=[("ml-team", name, data)],
    )
    facts = snapshot.facts_for("ml-team")
    assert facts.config_maps == {name: {"RUNAI-VISIBLE-DEVICES": "GPU-1"}}
    decision = evaluate(subject_for(copy.deepcopy(POD), namespace="ml-team"), RULES, facts)
    assert "visible-devices" in {f.rule for f in decision.denials}
