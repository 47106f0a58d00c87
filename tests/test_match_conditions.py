"""The webhooks' matchConditions, evaluated with a real CEL interpreter.

The conditions of the rendered base are run against objects built for every routed kind and
against the corpus, with the webhook's own pod views as the judge of which objects it must see.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cel
import pytest
from manifests_support import (
    NOT_ROUTED,
    RULES,
    resource_of,
    routed,
    webhook_entries,
)

from webhook.engine import compile_rules, evaluate, subject_for
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.podviews import group_of, pod_views
from webhook.engine.workloads import DEFAULT_TABLE
from webhook.facts.snapshotfile import load_snapshot
from webhook.facts.static import StaticSnapshot
from webhook.ruleset.models import RuleSet

UNTAINTED = (
    Path(__file__).parent
    / "golden"
    / "access-untainted-gpu-nodes-every-pod-gets-void"
    / "cluster.yaml"
)
# DeviceClasses of NVIDIA's DRA driver (GPUs, MIG, IMEX channels) and ml-team's claim templates
# and claims: which DRA claims hand out GPUs is known only from these.
DRA = Path(__file__).parent / "golden" / "dra-claim-template-pod-patched" / "cluster.yaml"

# --- (b) matchConditions, evaluated with CEL ----------------------------------------------------


@functools.cache
def _programs() -> tuple[tuple[str, Any], ...]:
    """The mutating webhook's conditions, compiled (the validating ones are the same)."""
    (hook,) = [h for kind, h in webhook_entries() if kind == "MutatingWebhookConfiguration"]
    return tuple((c["name"], cel.compile(c["expression"])) for c in hook["matchConditions"])


def _request(obj: dict[str, Any], operation: str) -> dict[str, Any]:
    """The `request` variable as the apiserver builds it for matchConditions."""
    group, _, version = str(obj.get("apiVersion", "v1")).rpartition("/")
    kind = {"group": group, "version": version, "kind": obj.get("kind", "")}
    resource = {"group": group, "version": version, "resource": resource_of(kind["kind"])}
    return {
        "kind": kind,
        "resource": resource,
        "subResource": "",
        "requestKind": kind,
        "requestResource": resource,
        "name": obj.get("metadata", {}).get("name", ""),
        "namespace": "ml-team",
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }


def selects(obj: dict[str, Any], *, operation: str = "CREATE", old: Any = None) -> bool:
    """Whether the apiserver would call the webhooks: every matchCondition is true."""
    context = cel.Context()
    context.add_variable("object", obj)
    context.add_variable("oldObject", old)
    context.add_variable("request", _request(obj, operation))
    results = {name: program.execute(context) for name, program in _programs()}
    assert all(isinstance(r, bool) for r in results.values()), results
    return all(results.values())


def _container(**fields: Any) -> dict[str, Any]:
    return {"name": "main", "image": "nginx:1.27", **fields}


def _limits(name: str, amount: Any) -> dict[str, Any]:
    return {"containers": [_container(resources={"limits": {name: amount}})]}


def _requests(name: str, amount: Any) -> dict[str, Any]:
    return {"containers": [_container(resources={"requests": {name: amount}})]}


def _host(path: str) -> dict[str, Any]:
    return {
        "containers": [_container(volumeMounts=[{"name": "host", "mountPath": "/host"}])],
        "volumes": [{"name": "host", "hostPath": {"path": path}}],
    }


def _env(**env: Any) -> dict[str, Any]:
    return {"containers": [_container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", **env}])]}


def _tolerates(**toleration: Any) -> dict[str, Any]:
    return {"containers": [_container()], "tolerations": [toleration]}


def _claims(where: str = "containers", uses: bool = True, **claim: Any) -> dict[str, Any]:
    """A pod spec with DRA claim "gpu" (`claim`: its template or claim name), used by the
    container in `where` (or by none)."""
    used = {"resources": {"claims": [{"name": "gpu"}]}} if uses else {}
    spec = {"containers": [_container(**({} if where != "containers" else used))]}
    if where != "containers":
        spec[where] = [_container(name="setup", **used)]
    return {**spec, "resourceClaims": [{"name": "gpu", **claim}]}


# Pod specs and whether the webhook must see them.
POD_SPECS: dict[str, tuple[dict[str, Any], bool]] = {
    "plain-nginx": ({"containers": [_container()]}, False),
    "memory-only": (_limits("memory", "1Gi"), False),
    "gpu-zero-as-string": (_limits("nvidia.com/gpu", "0"), False),
    "gpu-zero-as-integer": (_limits("nvidia.com/gpu", 0), False),
    "another-vendors-resource": (_limits("example.com/fpga", "1"), False),
    "nvidia-gpu-limit": (_limits("nvidia.com/gpu", "1"), True),
    "nvidia-gpu-limit-as-integer": (_limits("nvidia.com/gpu", 1), True),
    "nvidia-gpu-in-requests-only": (_requests("nvidia.com/gpu", "2"), True),
    "mig-slice": (_limits("nvidia.com/mig-1g.5gb", "1"), True),
    "amd-gpu": (_limits("amd.com/gpu", "1"), True),
    "intel-gpu": (_limits("gpu.intel.com/i915", "1"), True),
    "time-sliced-shared-gpu": (_limits("nvidia.com/gpu.shared", "1"), True),
    "hami-gpu-memory": (_requests("nvidia.com/gpumem", "4096"), True),
    "hami-gpu-cores": (_requests("nvidia.com/gpucores", "30"), True),
    "fractional-gpu": (_limits("nvidia.com/gpu", "500m"), True),
    "gpu-in-init-container": (
        {
            "initContainers": [_container(resources={"limits": {"nvidia.com/gpu": "1"}})],
            "containers": [_container(name="app")],
        },
        True,
    ),
    "visible-devices-value": (_env(value="all"), True),
    "visible-devices-void": (_env(value="void"), True),
    "visible-devices-value-from": (
        _env(valueFrom={"configMapKeyRef": {"name": "gpus", "key": "ids"}}),
        True,
    ),
    "other-env-only": ({"containers": [_container(env=[{"name": "A", "value": "1"}])]}, False),
    "host-dev": (_host("/dev"), True),
    "host-dev-nvidia0": (_host("/dev/nvidia0"), True),
    "host-dev-nvidiactl": (_host("/dev/nvidiactl"), True),
    "host-dev-dri": (_host("/dev/dri"), True),
    "host-dev-dri-card": (_host("/dev/dri/card0"), True),
    "host-dev-with-trailing-slash": (_host("/dev/"), True),
    "host-dev-double-slash": (_host("/dev//nvidia0"), True),
    "host-dev-dot-segment": (_host("/./dev/nvidia0"), True),
    # Any hostPath: with privileged mode or not, on an untainted GPU node the facts judge it.
    "host-var-log": (_host("/var/log"), True),
    "host-dev-shm": (_host("/dev/shm"), True),
    "tolerates-nvidia-taint": (
        _tolerates(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
        True,
    ),
    "tolerates-amd-taint": (_tolerates(key="amd.com/gpu", operator="Exists"), True),
    # A toleration of every taint lands on GPU nodes: its containers get their GPUs hidden.
    "tolerates-every-taint": (_tolerates(operator="Exists"), True),
    "tolerates-another-taint": (_tolerates(key="dedicated", operator="Equal", value="x"), False),
    "host-root": (_host("/"), True),
    "host-dev-kfd": (_host("/dev/kfd"), True),
    "host-dev-char-alias": (_host("/dev/char/195:0"), True),
    "host-dev-char": (_host("/dev/char"), True),
    "host-dotdot-alias": (_host("/var/../dev/nvidia0"), True),
    "host-proc-root-of-pid-1": (_host("/proc/1/root"), True),
    "host-proc": (_host("/proc"), True),
    "nvidia-device-list-mount": (
        {
            "containers": [
                _container(
                    volumeMounts=[
                        {"name": "x", "mountPath": "/var/run/nvidia-container-devices/all"}
                    ]
                )
            ],
            "volumes": [{"name": "x", "emptyDir": {}}],
        },
        True,
    ),
    "selects-gpu-product": (
        {"containers": [_container()], "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
        True,
    ),
    "selects-gke-accelerator-by-affinity": (
        {
            "containers": [_container()],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "cloud.google.com/gke-accelerator",
                                        "operator": "Exists",
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        },
        True,
    ),
    "selects-another-label": (
        {"containers": [_container()], "nodeSelector": {"pool": "web"}},
        False,
    ),
    "names-its-node": ({"containers": [_container()], "nodeName": "node-1"}, True),
    # Privileged asking for no GPU: sent, so the facts can show an untainted GPU node it reaches.
    "privileged-asks-no-gpu": (
        {"containers": [_container(securityContext={"privileged": True})]},
        True,
    ),
    "privileged-false": (
        {"containers": [_container(securityContext={"privileged": False})]},
        False,
    ),
    "privileged-as-a-string": (
        {"containers": [_container(securityContext={"privileged": "true"})]},
        False,
    ),
    "cuda-visible-devices": (_env(name="CUDA_VISIBLE_DEVICES", value="0"), True),
    "hip-visible-devices": (_env(name="HIP_VISIBLE_DEVICES", value="0"), True),
    "rocr-visible-devices": (
        _env(name="ROCR_VISIBLE_DEVICES", valueFrom={"fieldRef": {"fieldPath": "x"}}),
        True,
    ),
    "privileged-gpu-init-container": (
        {
            "initContainers": [_container(securityContext={"privileged": True})],
            "containers": [_container(resources={"limits": {"nvidia.com/gpu": "1"}})],
        },
        True,
    ),
    "envfrom-in-gpu-pod": (
        {
            "containers": [
                _container(
                    envFrom=[{"configMapRef": {"name": "x"}}],
                    resources={"limits": {"nvidia.com/gpu": "1"}},
                )
            ]
        },
        True,
    ),
    "envfrom-in-pod-that-cannot-reach-gpu-nodes": (
        {"containers": [_container(envFrom=[{"configMapRef": {"name": "x"}}])]},
        False,
    ),
    # DRA: only the cluster's DeviceClasses and the claim's template tell a GPU claim, so
    # every claim is sent (DRA_SPECS are also judged with those facts).
    "dra-claim-from-a-gpu-template": (_claims(resourceClaimTemplateName="single-gpu"), True),
    "dra-claim-by-name": (_claims(resourceClaimName="shared-mig"), True),
    "dra-claim-in-init-container": (
        _claims("initContainers", resourceClaimTemplateName="two-gpus"),
        True,
    ),
    "dra-claim-of-a-template-not-known": (_claims(resourceClaimTemplateName="made-later"), True),
    "dra-claim-of-a-class-of-no-gpus": (_claims(resourceClaimTemplateName="imex-channel"), True),
    "dra-claim-no-container-uses": (
        _claims(uses=False, resourceClaimTemplateName="single-gpu"),
        True,
    ),
    "dra-no-claims": ({"containers": [_container()], "resourceClaims": []}, False),
    "dra-class-implicit-resource": (
        _limits("deviceclass.resource.kubernetes.io/gpu.nvidia.com", "1"),
        True,
    ),
    "dra-class-implicit-resource-in-requests": (
        _requests("deviceclass.resource.kubernetes.io/mig.nvidia.com", 1),
        True,
    ),
    "dra-class-implicit-resource-zero": (
        _limits("deviceclass.resource.kubernetes.io/gpu.nvidia.com", "0"),
        False,
    ),
}


def _template(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "demo"}}, "spec": spec}


def _obj(api_version: str, kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "demo", "namespace": "ml-team"},
        **fields,
    }


def _controller(api_version: str, kind: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda s: _obj(
        api_version,
        kind,
        spec={"selector": {"matchLabels": {"app": "demo"}}, "template": _template(s)},
    )


def _ray_cluster(s: dict[str, Any], *, gpu_in: str) -> dict[str, Any]:
    """A Ray cluster spec with a CPU head and two worker groups; `s` goes in one of them."""
    cpu = {"containers": [_container(name="ray")]}
    return {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": _template(s if gpu_in == "head" else cpu),
        },
        "workerGroupSpecs": [
            {"groupName": "cpu", "template": _template(cpu)},
            {"groupName": "gpu", "template": _template(s if gpu_in == "worker" else cpu)},
        ],
    }


def _kubeflow(api_version: str, kind: str, field: str, role: str) -> Callable[..., dict[str, Any]]:
    cpu = {"containers": [_container()]}
    return lambda s: _obj(
        api_version,
        kind,
        spec={field: {"Master": {"template": _template(cpu)}, role: {"template": _template(s)}}},
    )


# Every routed kind, with the pod spec placed where that kind keeps it.
KINDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "Pod": lambda s: _obj("v1", "Pod", spec=s),
    "PodTemplate": lambda s: _obj("v1", "PodTemplate", template=_template(s)),
    "ReplicationController": lambda s: _obj(
        "v1", "ReplicationController", spec={"template": _template(s)}
    ),
    "Deployment": _controller("apps/v1", "Deployment"),
    "StatefulSet": _controller("apps/v1", "StatefulSet"),
    "DaemonSet": _controller("apps/v1", "DaemonSet"),
    "ReplicaSet": _controller("apps/v1", "ReplicaSet"),
    "Job": lambda s: _obj("batch/v1", "Job", spec={"template": _template(s)}),
    "CronJob": lambda s: _obj(
        "batch/v1",
        "CronJob",
        spec={"schedule": "@daily", "jobTemplate": {"spec": {"template": _template(s)}}},
    ),
    "RayCluster-head": lambda s: _obj(
        "ray.io/v1", "RayCluster", spec=_ray_cluster(s, gpu_in="head")
    ),
    "RayCluster-worker": lambda s: _obj(
        "ray.io/v1", "RayCluster", spec=_ray_cluster(s, gpu_in="worker")
    ),
    "RayJob-worker": lambda s: _obj(
        "ray.io/v1",
        "RayJob",
        spec={"entrypoint": "python x.py", "rayClusterSpec": _ray_cluster(s, gpu_in="worker")},
    ),
    "RayJob-submitter": lambda s: _obj(
        "ray.io/v1", "RayJob", spec={"entrypoint": "x", "submitterPodTemplate": _template(s)}
    ),
    "RayService-head": lambda s: _obj(
        "ray.io/v1", "RayService", spec={"rayClusterConfig": _ray_cluster(s, gpu_in="head")}
    ),
    "PyTorchJob": _kubeflow("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", "Worker"),
    "TFJob": _kubeflow("kubeflow.org/v1", "TFJob", "tfReplicaSpecs", "Worker"),
    "MPIJob-v1": _kubeflow("kubeflow.org/v1", "MPIJob", "mpiReplicaSpecs", "Worker"),
    "MPIJob-v2beta1": _kubeflow("kubeflow.org/v2beta1", "MPIJob", "mpiReplicaSpecs", "Launcher"),
    "XGBoostJob": _kubeflow("kubeflow.org/v1", "XGBoostJob", "xgbReplicaSpecs", "Worker"),
    "PaddleJob": _kubeflow("kubeflow.org/v1", "PaddleJob", "paddleReplicaSpecs", "Worker"),
    "JAXJob": _kubeflow("kubeflow.org/v1", "JAXJob", "jaxReplicaSpecs", "Worker"),
    "InferenceService-predictor": lambda s: _obj(
        "serving.kserve.io/v1beta1", "InferenceService", spec={"predictor": s}
    ),
    "InferenceService-transformer": lambda s: _obj(
        "serving.kserve.io/v1beta1",
        "InferenceService",
        spec={"predictor": {"containers": [_container()]}, "transformer": s},
    ),
    "JobSet": lambda s: _obj(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        spec={
            "replicatedJobs": [
                {"name": "cpu", "template": {"spec": {"template": _template(_limits("cpu", 1))}}},
                {"name": "gpu", "template": {"spec": {"template": _template(s)}}},
            ]
        },
    ),
    "LeaderWorkerSet-leader": lambda s: _obj(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        spec={"leaderWorkerTemplate": {"leaderTemplate": _template(s), "size": 2}},
    ),
    "LeaderWorkerSet-worker": lambda s: _obj(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        spec={"leaderWorkerTemplate": {"workerTemplate": _template(s), "size": 2}},
    ),
    "InferenceService-worker": lambda s: _obj(
        "serving.kserve.io/v1beta1",
        "InferenceService",
        spec={"predictor": {"model": {"modelFormat": {"name": "vllm"}}, "workerSpec": s}},
    ),
    "ServingRuntime": lambda s: _obj(
        "serving.kserve.io/v1alpha1",
        "ServingRuntime",
        spec={"supportedModelFormats": [{"name": "vllm"}], **s},
    ),
    "ClusterServingRuntime-worker": lambda s: _obj(
        "serving.kserve.io/v1alpha1",
        "ClusterServingRuntime",
        spec={"containers": [_container(name="kserve-container")], "workerSpec": s},
    ),
    "LLMInferenceService-decode": lambda s: _obj(
        "serving.kserve.io/v1alpha1",
        "LLMInferenceService",
        spec={"model": {"uri": "hf://org/model"}, "template": s},
    ),
    "LLMInferenceService-prefill-worker": lambda s: _obj(
        "serving.kserve.io/v1alpha2",
        "LLMInferenceService",
        spec={"model": {"uri": "hf://org/model"}, "prefill": {"worker": s}},
    ),
    "TrainingRuntime": lambda s: _obj(
        "trainer.kubeflow.org/v1alpha1",
        "TrainingRuntime",
        spec={"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": _template(s)}}},
        ]}}},
    ),
    "ClusterTrainingRuntime": lambda s: _obj(
        "trainer.kubeflow.org/v1alpha1",
        "ClusterTrainingRuntime",
        spec={"template": {"spec": {"replicatedJobs": [
            {"name": "init", "template": {"spec": {"template": _template(_limits("cpu", 1))}}},
            {"name": "node", "template": {"spec": {"template": _template(s)}}},
        ]}}},
    ),
    "VolcanoJob": lambda s: _obj(
        "batch.volcano.sh/v1alpha1",
        "Job",
        spec={"tasks": [{"name": "cpu", "template": _template(_limits("cpu", 1))},
                        {"name": "gpu", "replicas": 2, "template": _template(s)}]},
    ),
    "RoleBasedGroup-v1alpha1": lambda s: _obj(
        "workloads.x-k8s.io/v1alpha1",
        "RoleBasedGroup",
        spec={"roles": [{"name": "router", "replicas": 1, "template": _template(_limits("cpu", 1))},
                        {"name": "inference", "replicas": 2, "template": _template(s)}]},
    ),
    "RoleBasedGroup-leader-worker": lambda s: _obj(
        "workloads.x-k8s.io/v1alpha2",
        "RoleBasedGroup",
        spec={"roles": [{"name": "prefill", "replicas": 2,
                         "leaderWorkerPattern": {"size": 4, "template": _template(s)}}]},
    ),
    "RoleBasedGroup-role-template": lambda s: _obj(
        "workloads.x-k8s.io/v1alpha2",
        "RoleBasedGroup",
        spec={"roleTemplates": [{"name": "base", "template": _template(s)}],
              "roles": [{"name": "decode", "replicas": 1,
                         "standalonePattern": {"templateRef": {"name": "base"}}}]},
    ),
    "DisaggregatedSet-worker": lambda s: _obj(
        "disaggregatedset.x-k8s.io/v1",
        "DisaggregatedSet",
        spec={"roles": [{"name": "decode", "spec": {"replicas": 1, "leaderWorkerTemplate": {
            "size": 2, "workerTemplate": _template(s)}}}]},
    ),
    "Workspace": lambda s: _obj(
        "kaito.sh/v1beta1",
        "Workspace",
        resource={"count": 1, "labelSelector": {"matchLabels": {"apps": "llm"}}},
        inference={"template": _template(s)},
    ),
    "InferenceSet": lambda s: _obj(
        "kaito.sh/v1beta1",
        "InferenceSet",
        spec={"replicas": 2, "labelSelector": {"matchLabels": {"apps": "llm"}},
              "template": {"inference": {"template": _template(s)}}},
    ),
}  # fmt: skip
# Kinds without a pod spec, tested in test_workloads.py: TrainJob keeps one container-like
# trainer with its resources under `resourcesPerNode`, a NIMService's spec is one.
NO_POD_SPEC = {
    ("trainer.kubeflow.org", "TrainJob"),
    ("apps.nvidia.com", "NIMService"),
    ("apps.nvidia.com", "NIMPipeline"),
}


def needs_webhook(obj: dict[str, Any], rules: RuleSet = RULES) -> bool:
    """The judge: the engine itself. The webhook must see an object with a GPU pod spec (the
    cluster-aware rules judge those with facts), and any object the engine would change or
    judge under the rule set (the GPU-access rules reach pods that ask for no GPU)."""
    group, kind = group_of(obj.get("apiVersion")), obj["kind"]
    compiled = _compiled(rules)
    if any(
        view.asks_gpu
        for view in pod_views(obj, group=group, kind=kind, is_gpu=compiled.base.is_gpu)
    ):
        return True
    decision = evaluate(subject_for(obj, namespace="ml-team"), compiled, None)
    return bool(decision.patch or decision.judged or decision.unreadable)


def needs_webhook_dra(obj: dict[str, Any]) -> bool:
    """`needs_webhook` with the DRA driver's classes and ml-team's claim templates known."""
    facts = _dra().facts_for("ml-team")
    decision = evaluate(subject_for(obj, namespace="ml-team"), _compiled(RULES), facts)
    return bool(decision.patch or decision.judged or decision.unreadable)


@functools.cache
def _dra() -> StaticSnapshot:
    return load_snapshot(DRA)


def needs_webhook_untainted(obj: dict[str, Any]) -> bool:
    """`needs_webhook` with facts that show a GPU node without any taint."""
    facts = _untainted().facts_for("ml-team")
    decision = evaluate(subject_for(obj, namespace="ml-team"), _compiled(RULES), facts)
    return bool(decision.patch or decision.judged or decision.unreadable)


@functools.cache
def _untainted() -> StaticSnapshot:
    return load_snapshot(UNTAINTED)


_COMPILED: dict[int, CompiledRuleSet] = {}


def _compiled(rules: RuleSet) -> CompiledRuleSet:
    if id(rules) not in _COMPILED:
        _COMPILED[id(rules)] = compile_rules(rules)
    return _COMPILED[id(rules)]


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
    predictor[field]["resources"]["limits"]["nvidia.com/gpu"] = 0
    assert selects(obj) is False


def test_a_multi_node_kserve_predictor_is_selected_for_its_gpu_workers() -> None:
    obj = KINDS["InferenceService-predictor"](
        {"model": {"storageUri": "s3://m"}, "workerSpec": _limits("nvidia.com/gpu", "1")}
    )
    assert selects(obj) is True


def test_an_object_being_deleted_is_not_sent_even_when_it_asks_for_a_gpu() -> None:
    obj = KINDS["Deployment"](_limits("nvidia.com/gpu", "1"))
    old = copy.deepcopy(obj)
    obj["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    obj["metadata"]["finalizers"] = []
    assert selects(obj, operation="UPDATE", old=old) is False
    assert selects(old, operation="UPDATE", old=old) is True
