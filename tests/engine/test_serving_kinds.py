"""The serving stacks' own kinds, built in: SGLang's RoleBasedGroup, LWS's DisaggregatedSet,
KAITO's Workspace and InferenceSet, the NIM operator's NIMService and NIMPipeline.

Each object here is a minimal one modelled on the project's documented examples (RBG's
doc/features/patterns.md and v1alpha1 examples, LWS's config/samples, KAITO's
examples/custom-model-integration, the NIM operator's config/samples), checked for what a
user relies on: every GPU template is found where the CRD keeps it, counted as the project's
controller multiplies it, judged and patched; a worker template is not asked for a readiness
probe; and a NIMService's container is named in messages as the operator names it. The
corpus's NIMServices, when present, are read from there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import CORPUS
from webhook.engine import compile_rules, evaluate, subject_for
from webhook.engine.podviews import pod_views
from webhook.ruleset.models import RuleSet

RULES = compile_rules(RuleSet())
GPU = {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"}}


def _template(name: str = "server", ports: bool = True, **extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "lmsysorg/sglang:latest", "resources": GPU}
    if ports:
        container["ports"] = [{"containerPort": 8000}]
    return {"spec": {"containers": [{**container, **extra}]}}


def _views(obj: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Each pod spec's dotted path -> (pods it stands for at once, which containers serve)."""
    group = obj["apiVersion"].rpartition("/")[0]
    found = pod_views(obj, group=group, kind=obj["kind"], is_gpu=RULES.base.is_gpu)
    return {v.field_path: (v.replicas, v.serving) for v in found}


def _rbg(version: str, role: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"workloads.x-k8s.io/{version}",
        "kind": "RoleBasedGroup",
        "metadata": {"name": "sglang"},
        "spec": {"roles": [role]},
    }


# --- where the pods are, and how many ------------------------------------------------------------


def test_a_rolebasedgroup_counts_each_roles_instances_and_pods_per_instance() -> None:
    standalone = {"name": "decode", "replicas": 3, "standalonePattern": {"template": _template()}}
    assert _views(_rbg("v1alpha2", standalone)) == {
        "spec.roles[0].standalonePattern.template.spec": (3, "ports")
    }
    # patterns.md: "size: 4 # 1 leader + 3 workers = 4 pods per instance", 2 instances.
    tp = {"name": "prefill", "replicas": 2,
          "leaderWorkerPattern": {"size": 4, "template": _template()}}  # fmt: skip
    assert _views(_rbg("v1alpha2", tp)) == {
        "spec.roles[0].leaderWorkerPattern.template.spec": (8, "ports")
    }
    # v1alpha1: the role's own template; a leaderWorkerSet role makes `size` pods per replica.
    lws = {"name": "inference", "replicas": 2, "template": _template(),
           "workload": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"},
           "leaderWorkerSet": {"size": 2}}  # fmt: skip
    assert _views(_rbg("v1alpha1", lws)) == {"spec.roles[0].template.spec": (4, "ports")}
    plain = {"name": "router", "replicas": 1, "template": _template()}
    assert _views(_rbg("v1alpha1", plain)) == {"spec.roles[0].template.spec": (1, "ports")}


def test_a_rolebasedgroups_reusable_role_template_is_judged_too() -> None:
    obj = _rbg("v1alpha2", {"name": "prefill", "replicas": 2,
                            "standalonePattern": {"templateRef": {"name": "base"}}})  # fmt: skip
    half = {"limits": {"nvidia.com/gpu": "0.5"}}
    obj["spec"]["roleTemplates"] = [{"name": "base", "template": _template(resources=half)}]
    decision = evaluate(subject_for(obj, namespace="ml-team"), RULES)
    assert not decision.allowed
    assert (
        'spec.roleTemplates[0].template.spec.containers[0].resources.limits["nvidia.com/gpu"]'
        in (decision.message())
    )


def _disaggregated(leader: bool) -> dict[str, Any]:
    lwt: dict[str, Any] = {"size": 4, "workerTemplate": _template("worker")}
    if leader:
        lwt["leaderTemplate"] = _template("leader")
    return {
        "apiVersion": "disaggregatedset.x-k8s.io/v1",
        "kind": "DisaggregatedSet",
        "metadata": {"name": "pd"},
        "spec": {"slices": 2, "roles": [{"name": "prefill",
                                         "spec": {"replicas": 3, "leaderWorkerTemplate": lwt}}]},
    }  # fmt: skip


def test_a_disaggregatedset_counts_slices_x_groups_x_pods_and_its_workers_do_not_serve() -> None:
    base = "spec.roles[0].spec.leaderWorkerTemplate"
    assert _views(_disaggregated(leader=True)) == {
        f"{base}.leaderTemplate.spec": (2 * 3, "ports"),
        f"{base}.workerTemplate.spec": (2 * 3 * 3, ""),
    }
    # Without a leader template the worker template makes the leader too: all 4, serving.
    assert _views(_disaggregated(leader=False)) == {
        f"{base}.workerTemplate.spec": (2 * 3 * 4, "ports")
    }


def test_kaito_runs_a_workspace_template_on_count_nodes_an_inferenceset_replicas_times() -> None:
    workspace = {
        "apiVersion": "kaito.sh/v1beta1",
        "kind": "Workspace",
        "metadata": {"name": "workspace-custom-llm"},
        "resource": {"count": 2, "labelSelector": {"matchLabels": {"apps": "custom-llm"}}},
        "inference": {"template": _template(ports=False)},
    }
    assert _views(workspace) == {"inference.template.spec": (2, "main")}
    del workspace["resource"]["count"]  # type: ignore[attr-defined]
    assert _views(workspace) == {"inference.template.spec": (1, "main")}
    preset = {**workspace, "inference": {"preset": {"name": "phi-4-mini-instruct"}}}
    assert _views(preset) == {}  # KAITO renders a preset itself: its pods are judged
    inference_set = {
        "apiVersion": "kaito.sh/v1beta1",
        "kind": "InferenceSet",
        "metadata": {"name": "llama"},
        "spec": {"replicas": 3, "labelSelector": {"matchLabels": {"apps": "llama"}},
                 "template": {"inference": {"template": _template(ports=False)}}},
    }  # fmt: skip
    assert _views(inference_set) == {"spec.template.inference.template.spec": (3, "main")}


# --- gpu-readiness-probe: only containers that serve --------------------------------------------


def _warned(obj: dict[str, Any]) -> list[str]:
    decision = evaluate(subject_for(obj, namespace="ml-team"), RULES)
    return [j.finding.field for j in decision.judged if j.finding.rule == "gpu-readiness-probe"]


def test_only_the_serving_containers_of_a_serving_kind_are_asked_for_a_readiness_probe() -> None:
    base = "spec.roles[0].spec.leaderWorkerTemplate"
    assert _warned(_disaggregated(leader=True)) == [
        f"{base}.leaderTemplate.spec.containers[0].readinessProbe"
    ]
    assert _warned(_disaggregated(leader=False)) == [
        f"{base}.workerTemplate.spec.containers[0].readinessProbe"
    ]
    # A KAITO template's first container is the model server, ports or not; a sidecar beside
    # it that declares none is not.
    template = _template(ports=False)
    template["spec"]["containers"].append({"name": "sidecar", "image": "x", "resources": GPU})
    workspace = {"apiVersion": "kaito.sh/v1beta1", "kind": "Workspace",
                 "metadata": {"name": "w"}, "inference": {"template": template}}  # fmt: skip
    assert _warned(workspace) == ["inference.template.spec.containers[0].readinessProbe"]
    # The same template in a Deployment: nothing declares a port, nothing serves.
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"replicas": 1, "template": template}}  # fmt: skip
    assert _warned(deployment) == []


# --- the container a NIMService makes ------------------------------------------------------------


def _nim(meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps.nvidia.com/v1alpha1",
        "kind": "NIMService",
        "metadata": meta,
        "spec": {"image": {"repository": "nvcr.io/nim/meta/llama-3.1-8b-instruct", "tag": "1.3.3"},
                 "replicas": 1, "resources": {"limits": {"nvidia.com/gpu": "0.5"}},
                 "expose": {"service": {"type": "ClusterIP", "port": 8000}}},
    }  # fmt: skip


def _message(obj: dict[str, Any]) -> str:
    return evaluate(subject_for(obj, namespace="ml-team"), RULES).message()


def test_a_nimservices_container_is_named_as_the_operator_names_it_never_spec() -> None:
    assert 'container "llama-ctr" asks 0.5' in _message(_nim({"name": "llama"}))
    # generateName: no name yet, so the kind, the container's owner.
    unnamed = _message(_nim({"generateName": "llama-"}))
    assert 'container "nimservice" asks 0.5' in unnamed
    assert 'container "spec"' not in unnamed


def test_a_nimpipelines_containers_are_named_after_each_service() -> None:
    service = _nim({})["spec"]
    pipeline = {
        "apiVersion": "apps.nvidia.com/v1alpha1",
        "kind": "NIMPipeline",
        "metadata": {"name": "rag"},
        "spec": {"services": [{"name": "embedder", "enabled": True, "spec": service},
                              {"enabled": True, "spec": service}]},
    }  # fmt: skip
    message = _message(pipeline)
    assert 'container "embedder-ctr" asks 0.5' in message
    assert 'container "spec.services[1].spec" asks 0.5' in message  # no name: its path


def _corpus_nimservices() -> list[tuple[str, dict[str, Any]]]:
    folder = CORPUS / "manifests"
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.yaml")):
        if "NIMService" not in path.read_text(errors="replace"):
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "NIMService":
                found.append((Path(path).name, doc))
    return found


@pytest.mark.skipif(not _corpus_nimservices(), reason="../shared/corpus has no NIMService")
@pytest.mark.parametrize(("name", "obj"), _corpus_nimservices())
def test_a_corpus_nimservice_names_its_container_as_the_operator_does(
    name: str, obj: dict[str, Any]
) -> None:
    decision = evaluate(subject_for(obj, namespace="ml-team"), RULES)
    assert decision.unreadable is None, name
    text = "\n".join([decision.message(), *decision.warning_lines()])
    assert 'container "spec"' not in text
    for judged in decision.judged:
        assert f'container "{obj["metadata"]["name"]}-ctr"' in judged.finding.summary, name
