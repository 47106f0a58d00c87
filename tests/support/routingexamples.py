"""Pod specs (`POD_SPECS`) and every routed kind built around one (`KINDS`), for routing tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _container(**fields: Any) -> dict[str, Any]:
    return {"name": "main", "image": "nginx:1.27", **fields}


def limits_spec(name: str, amount: Any) -> dict[str, Any]:
    return {"containers": [_container(resources={"limits": {name: amount}})]}


def _cpu() -> dict[str, Any]:
    return limits_spec("cpu", 1)


def requests_spec(name: str, amount: Any) -> dict[str, Any]:
    return {"containers": [_container(resources={"requests": {name: amount}})]}


def host_spec(path: str) -> dict[str, Any]:
    return {
        "containers": [_container(volumeMounts=[{"name": "host", "mountPath": "/host"}])],
        "volumes": [{"name": "host", "hostPath": {"path": path}}],
    }


def env_spec(**env: Any) -> dict[str, Any]:
    return {"containers": [_container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", **env}])]}


def tolerates_spec(**toleration: Any) -> dict[str, Any]:
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
    "memory-only": (limits_spec("memory", "1Gi"), False),
    "gpu-zero-as-string": (limits_spec("nvidia.com/gpu", "0"), False),
    "gpu-zero-as-integer": (limits_spec("nvidia.com/gpu", 0), False),
    "another-vendors-resource": (limits_spec("example.com/fpga", "1"), False),
    "nvidia-gpu-limit": (limits_spec("nvidia.com/gpu", "1"), True),
    "nvidia-gpu-limit-as-integer": (limits_spec("nvidia.com/gpu", 1), True),
    "nvidia-gpu-in-requests-only": (requests_spec("nvidia.com/gpu", "2"), True),
    "mig-slice": (limits_spec("nvidia.com/mig-1g.5gb", "1"), True),
    "amd-gpu": (limits_spec("amd.com/gpu", "1"), True),
    "intel-gpu": (limits_spec("gpu.intel.com/i915", "1"), True),
    "time-sliced-shared-gpu": (limits_spec("nvidia.com/gpu.shared", "1"), True),
    "hami-gpu-memory": (requests_spec("nvidia.com/gpumem", "4096"), True),
    "hami-gpu-cores": (requests_spec("nvidia.com/gpucores", "30"), True),
    "fractional-gpu": (limits_spec("nvidia.com/gpu", "500m"), True),
    "gpu-in-init-container": (
        {
            "initContainers": [_container(resources={"limits": {"nvidia.com/gpu": "1"}})],
            "containers": [_container(name="app")],
        },
        True,
    ),
    "visible-devices-value": (env_spec(value="all"), True),
    "visible-devices-void": (env_spec(value="void"), True),
    "visible-devices-value-from": (
        env_spec(valueFrom={"configMapKeyRef": {"name": "gpus", "key": "ids"}}),
        True,
    ),
    "other-env-only": ({"containers": [_container(env=[{"name": "A", "value": "1"}])]}, False),
    "host-dev": (host_spec("/dev"), True),
    "host-dev-nvidia0": (host_spec("/dev/nvidia0"), True),
    "host-dev-nvidiactl": (host_spec("/dev/nvidiactl"), True),
    "host-dev-dri": (host_spec("/dev/dri"), True),
    "host-dev-dri-card": (host_spec("/dev/dri/card0"), True),
    "host-dev-with-trailing-slash": (host_spec("/dev/"), True),
    "host-dev-double-slash": (host_spec("/dev//nvidia0"), True),
    "host-dev-dot-segment": (host_spec("/./dev/nvidia0"), True),
    # Any hostPath: with privileged mode or not, on an untainted GPU node the facts judge it.
    "host-var-log": (host_spec("/var/log"), True),
    "host-dev-shm": (host_spec("/dev/shm"), True),
    "tolerates-nvidia-taint": (
        tolerates_spec(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
        True,
    ),
    "tolerates-amd-taint": (tolerates_spec(key="amd.com/gpu", operator="Exists"), True),
    # A toleration of every taint lands on GPU nodes: its containers get their GPUs hidden.
    "tolerates-every-taint": (tolerates_spec(operator="Exists"), True),
    "tolerates-another-taint": (
        tolerates_spec(key="dedicated", operator="Equal", value="x"),
        False,
    ),
    "host-root": (host_spec("/"), True),
    "host-dev-kfd": (host_spec("/dev/kfd"), True),
    "host-dev-char-alias": (host_spec("/dev/char/195:0"), True),
    "host-dev-char": (host_spec("/dev/char"), True),
    "host-dotdot-alias": (host_spec("/var/../dev/nvidia0"), True),
    "host-proc-root-of-pid-1": (host_spec("/proc/1/root"), True),
    "host-proc": (host_spec("/proc"), True),
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
    "cuda-visible-devices": (env_spec(name="CUDA_VISIBLE_DEVICES", value="0"), True),
    "hip-visible-devices": (env_spec(name="HIP_VISIBLE_DEVICES", value="0"), True),
    "rocr-visible-devices": (
        env_spec(name="ROCR_VISIBLE_DEVICES", valueFrom={"fieldRef": {"fieldPath": "x"}}),
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
        limits_spec("deviceclass.resource.kubernetes.io/gpu.nvidia.com", "1"),
        True,
    ),
    "dra-class-implicit-resource-in-requests": (
        requests_spec("deviceclass.resource.kubernetes.io/mig.nvidia.com", 1),
        True,
    ),
    "dra-class-implicit-resource-zero": (
        limits_spec("deviceclass.resource.kubernetes.io/gpu.nvidia.com", "0"),
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
                {"name": "cpu", "template": {"spec": {"template": _template(_cpu())}}},
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
            {"name": "init", "template": {"spec": {"template": _template(_cpu())}}},
            {"name": "node", "template": {"spec": {"template": _template(s)}}},
        ]}}},
    ),
    "VolcanoJob": lambda s: _obj(
        "batch.volcano.sh/v1alpha1",
        "Job",
        spec={"tasks": [{"name": "cpu", "template": _template(_cpu())},
                        {"name": "gpu", "replicas": 2, "template": _template(s)}]},
    ),
    "RoleBasedGroup-v1alpha1": lambda s: _obj(
        "workloads.x-k8s.io/v1alpha1",
        "RoleBasedGroup",
        spec={"roles": [{"name": "router", "replicas": 1, "template": _template(_cpu())},
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
# Kinds without a pod spec, tested in tests/engine/test_workloads.py: TrainJob keeps one
# container-like trainer with its resources under `resourcesPerNode`, a NIMService's spec is one.
NO_POD_SPEC = {
    ("trainer.kubeflow.org", "TrainJob"),
    ("apps.nvidia.com", "NIMService"),
    ("apps.nvidia.com", "NIMPipeline"),
}
