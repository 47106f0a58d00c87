"""Exemptions a tenant cannot claim: what each kind relaxes follows from who can satisfy it
(golden cases `exempt-*` show whole objects)."""

from __future__ import annotations

from typing import Any

from webhook.engine.checks import MUTATIONS, VALIDATIONS
from webhook.engine.checks.isolation import ISOLATION_RULES
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import evaluate
from webhook.engine.subject import subject_for
from webhook.facts.model import PodGpus
from webhook.facts.static import StaticSnapshot
from webhook.ruleset import relaxing
from webhook.ruleset.models import RuleSet


def _rules(**top: Any) -> Any:
    return compile_rules(RuleSet.model_validate(top))


def _facts(namespace: str = "ml-team", pods: tuple[PodGpus, ...] = ()) -> Any:
    snap = StaticSnapshot(
        namespaces={namespace: {}}, nodes=[], quotas=[], priority_classes=[], pods=pods
    )
    return snap.facts_for(namespace)


def _pod(labels: dict[str, str], gpus: int = 4, account: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "cuda",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ]
    }
    if account:
        spec["serviceAccountName"] = account
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": labels},
        "spec": spec,
    }


def test_every_rule_is_in_exactly_one_group() -> None:
    """A new rule must say who may relax it."""
    groups = (relaxing.ISOLATION_RULES, relaxing.SHARED_RULES, relaxing.OWN_RULES)
    every = {v.rule for v in VALIDATIONS} | {m.rule for m in MUTATIONS}
    listed = [r for g in groups for r in g]
    assert sorted(listed) == sorted(every)
    assert set(relaxing.ISOLATION_RULES) == ISOLATION_RULES


def test_a_label_exemption_keeps_the_hold_and_the_quota() -> None:
    """The pod's own labels never take it out of the budget: it is charged (holds) like any."""
    rules = _rules(exemptions={"podSelector": {"matchLabels": {"tier": "system"}}})
    decision = evaluate(subject_for(_pod({"tier": "system"}), namespace="ml-team"), rules, _facts())
    assert decision.hold is not None
    assert dict(decision.hold.gpus) == {"nvidia.com/gpu": 4}


def test_a_label_exemption_relaxes_only_the_pods_own_rules() -> None:
    rules = _rules(
        exemptions={"podSelector": {"matchLabels": {"tier": "system"}}},
        rules={"gpu-memory-limit": {"mode": "enforce"}},
    )
    labelled = evaluate(subject_for(_pod({"tier": "system"}), namespace="ml-team"), rules, _facts())
    plain = evaluate(subject_for(_pod({}), namespace="ml-team"), rules, _facts())
    assert "gpu-memory-limit" in {j.finding.rule for j in plain.judged}
    assert "gpu-memory-limit" not in {j.finding.rule for j in labelled.judged}
    assert labelled.patch == ()  # no toleration or /dev/shm: only the pod's author pays
    assert plain.patch != ()


def test_every_exported_rule_is_one_a_label_may_relax() -> None:
    """The native policies test `podSelector` against every exported rule at once: that is
    right only while each of them is one a label relaxes."""
    from webhook.export import mutating
    from webhook.export.validations import EXPORTED

    exported = {r.rule for r in EXPORTED} | {m.rule for m in mutating._MUTATIONS}
    assert exported <= relaxing.BY_LABEL


# ---- built-in exemptions: a component's own pods, never a namespace name ---------------------


def test_built_in_exemptions_relax_only_gpu_access_for_the_components_own_pods() -> None:
    from webhook.ruleset.components import COMPONENTS

    rules = RuleSet()
    assert rules.exemptions.all_namespaces == ["kube-system", "kube-public", "kube-node-lease"]
    in_force = rules.exemptions.components
    assert [c.name for c in in_force] == [c.name for c in COMPONENTS if c.accounts or c.daemonsets]
    assert frozenset(relaxing.ISOLATION_RULES) == relaxing.BY_COMPONENT


def test_built_in_false_turns_every_built_in_exemption_off() -> None:
    off = RuleSet.model_validate({"exemptions": {"builtIn": False, "namespaces": ["sandbox"]}})
    assert off.exemptions.all_namespaces == ["sandbox"]
    assert off.exemptions.components == []
    compiled = compile_rules(off)
    assert compiled.component_accounts is None and compiled.exempt_daemonsets is None


def test_removing_a_namespace_takes_its_component_exemption_away_there_only() -> None:
    rs = RuleSet.model_validate({"exemptions": {"remove": {"namespaces": ["gpu-operator"]}}})
    operator = next(c for c in rs.exemptions.components if c.name == "NVIDIA GPU Operator")
    assert operator.namespaces == ("nvidia-gpu-operator",)


def test_a_namespace_that_exists_without_its_component_is_named() -> None:
    from webhook.ruleset.components import COMPONENTS, unattended

    existing = {"kai-scale-adjust", "gpu-operator", "inteldeviceplugins-system", "ml-team"}
    pods = {
        "gpu-operator": [("nvidia-device-plugin", "nvidia-device-plugin-daemonset-x7k2p")],
        "kai-scale-adjust": [("default", "escape")],  # a tenant's pod, not the adjuster's
        "inteldeviceplugins-system": [("default", "intel-gpu-plugin-sample-abcde")],
    }
    lines = unattended(COMPONENTS, existing, pods)
    assert len(lines) == 1
    assert lines[0].startswith("built-in exempt namespace kai-scale-adjust exists but runs no")
    assert "exemptions.remove.namespaces: [kai-scale-adjust]" in lines[0]


# ---- exemptions.workloads: a DaemonSet by name, its pods as its controller makes them --------

CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
WORKLOAD = {"workloads": [{"kind": "DaemonSet", "namespace": "default", "name": "dcgm-exporter"}]}
AGENT_SPEC: dict[str, Any] = {
    "serviceAccountName": "dcgm-exporter",
    "tolerations": [{"operator": "Exists"}],
    "containers": [
        {
            "name": "dcgm-exporter",
            "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.1-ubuntu22.04",
            "securityContext": {"privileged": True},
            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        }
    ],
    "volumes": [{"name": "pr", "hostPath": {"path": "/var/lib/kubelet/pod-resources"}}],
}


def _owned_pod(spec: dict[str, Any]) -> dict[str, Any]:
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "dcgm-exporter",
        "uid": "6f1c3a52-8d1e-4f4e-9c2b-1a2b3c4d5e6f",
        "controller": True,
    }
    meta = {"name": "dcgm-exporter-abcde", "labels": {}, "ownerReferences": [owner]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def test_the_advised_exemption_names_the_daemonset_and_what_it_trusts() -> None:
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "dcgm-exporter"},
        "spec": {"template": {"metadata": {}, "spec": AGENT_SPEC}},
    }
    denied = evaluate(subject_for(daemonset, namespace="default"), _rules(), None)
    message = denied.message()
    assert "exemptions.workloads: [{kind: DaemonSet, namespace: default, name: dcgm-exporter}]" in (
        message
    )
    assert "trusts whoever may create or update DaemonSets in default" in message
    assert "serviceAccounts" not in message and "exemptions.namespaces" not in message
    # Taking the advice admits the DaemonSet, and its pods as its controller makes them...
    advised = _rules(exemptions=WORKLOAD)
    assert evaluate(subject_for(daemonset, namespace="default"), advised, None).allowed
    made = subject_for(_owned_pod(AGENT_SPEC), namespace="default", user=CONTROLLER)
    assert evaluate(made, advised, None).allowed


def test_nothing_a_tenant_can_send_matches_a_workload_exemption() -> None:
    """A tenant of `default` may name the account, copy the labels, write the ownerReference
    with the DaemonSet's real uid, and ask for 64 GPUs: none of it is the controller."""
    advised = _rules(exemptions=WORKLOAD)
    greedy = {
        **AGENT_SPEC,
        "containers": [
            {**AGENT_SPEC["containers"][0], "resources": {"limits": {"nvidia.com/gpu": "64"}}}
        ],
    }
    forged = subject_for(_owned_pod(greedy), namespace="default", user="alice@example.com")
    decision = evaluate(forged, advised, None)
    assert {f.rule for f in decision.denials} >= {"privileged-gpu", "visible-devices"}
    unknown = subject_for(_owned_pod(greedy), namespace="default")  # an audit: no requester
    assert not evaluate(unknown, advised, None).allowed
    # ...and even the controller's own pods stay within the nodes (schedulability is judged).
    from webhook.facts.model import Node

    snap = StaticSnapshot(
        namespaces={"default": {}},
        nodes=[Node("n", {}, {"nvidia.com/gpu": 8})],
        quotas=[],
        priority_classes=[],
        pods=[],
    )
    made = subject_for(_owned_pod(greedy), namespace="default", user=CONTROLLER)
    decision = evaluate(made, advised, snap.facts_for("default"))
    assert {f.rule for f in decision.denials} == {"gpu-schedulable"}


def test_a_workload_namespace_must_be_one_name() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="the namespace must be one name"):
        RuleSet.model_validate(
            {
                "exemptions": {
                    "workloads": [{"kind": "DaemonSet", "namespace": "team-*", "name": "x"}]
                }
            }
        )


def test_the_requester_reaches_the_engine_from_the_review() -> None:
    import json

    from tests.support.reviews import review_for
    from webhook.server.admission import engine_request
    from webhook.server.review import decode

    review = review_for(_owned_pod(AGENT_SPEC), namespace="default", user=CONTROLLER)
    assert engine_request(decode(json.dumps(review).encode()).request).user == CONTROLLER
    bare = review_for(_pod({}), namespace="default")
    del bare["request"]["userInfo"]
    assert engine_request(decode(json.dumps(bare).encode()).request).user == ""
