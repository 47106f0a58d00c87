"""Scenario AdmissionReviews for bench/load.py: what a v1.30 apiserver sends to the webhook.

Every object is shaped as it arrives after defaulting and the built-in admission plugins
(ServiceAccount, DefaultTolerationSeconds, Priority) ran; `review()` wraps it in a CREATE
AdmissionReview with UID_MARK where the uid goes, and SCENARIOS lists what the benchmark runs.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

UID_MARK = "@@UID@@"  # replaced by bytes substitution, so a body is never re-encoded per request

SA_VOLUME_NAME = "kube-api-access-7xq2m"


def _sa_mount() -> dict[str, Any]:
    return {
        "name": SA_VOLUME_NAME,
        "readOnly": True,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    }


def _sa_volume() -> dict[str, Any]:
    """The projected token volume the ServiceAccount admission plugin adds to every pod."""
    return {
        "name": SA_VOLUME_NAME,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": "metadata.namespace",
                                },
                            }
                        ]
                    }
                },
            ],
            "defaultMode": 420,
        },
    }


def _http_probe(path: str, port: int, delay: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port, "scheme": "HTTP"},
        "initialDelaySeconds": delay,
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }


def _container_defaults() -> dict[str, Any]:
    return {
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }


def _vllm_container(*, pod: bool) -> dict[str, Any]:
    mounts = [{"name": "hf-cache", "mountPath": "/root/.cache/huggingface"}]
    if pod:
        mounts.append(_sa_mount())
    return {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.6.3",
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": [
            "--model=meta-llama/Llama-3.1-8B-Instruct",
            "--port=8000",
            "--tensor-parallel-size=1",
            "--gpu-memory-utilization=0.90",
            "--max-model-len=8192",
        ],
        "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
        "env": [
            {"name": "HF_HOME", "value": "/root/.cache/huggingface"},
            {
                "name": "HUGGING_FACE_HUB_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
            },
            {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
            {
                "name": "POD_IP",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
            },
        ],
        "resources": {
            "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
            "requests": {"cpu": "4", "memory": "48Gi"},
        },
        "volumeMounts": mounts,
        "readinessProbe": _http_probe("/health", 8000, 5),
        "livenessProbe": _http_probe("/health", 8000, 15),
        **_container_defaults(),
    }


def _nginx_container() -> dict[str, Any]:
    return {
        "name": "nginx",
        "image": "nginx:1.27.2",
        "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
        "env": [{"name": "NGINX_ENTRYPOINT_QUIET_LOGS", "value": "1"}],
        "resources": {
            "limits": {"memory": "256Mi"},
            "requests": {"cpu": "100m", "memory": "128Mi"},
        },
        "volumeMounts": [
            {"name": "conf", "mountPath": "/etc/nginx/conf.d", "readOnly": True},
            _sa_mount(),
        ],
        "readinessProbe": _http_probe("/", 80, 2),
        "livenessProbe": _http_probe("/", 80, 10),
        **_container_defaults(),
    }


def _pod_spec(
    containers: list[dict[str, Any]], volumes: list[dict[str, Any]], *, pod: bool
) -> dict[str, Any]:
    """Pod-level apiserver defaults; `pod` adds what only admission of a real Pod adds."""
    spec: dict[str, Any] = {
        "volumes": [*volumes, _sa_volume()] if pod else volumes,
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
    }
    if pod:
        spec["tolerations"] = [
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ]
        spec["priority"] = 0
        spec["preemptionPolicy"] = "PreemptLowerPriority"
    return spec


def _vllm_spec(*, pod: bool) -> dict[str, Any]:
    spec = _pod_spec(
        [_vllm_container(pod=pod)],
        [{"name": "hf-cache", "emptyDir": {"sizeLimit": "100Gi"}}],
        pod=pod,
    )
    spec["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    return spec


VLLM_LABELS = {
    "app.kubernetes.io/name": "vllm",
    "app.kubernetes.io/instance": "llama-8b",
    "app.kubernetes.io/component": "model-server",
}
VLLM_ANNOTATIONS = {"prometheus.io/scrape": "true", "prometheus.io/port": "8000"}


def _owner(kind: str, name: str, uid: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "apps/v1",
            "kind": kind,
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def _rs_pod(
    generate_name: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    spec: dict[str, Any],
) -> dict[str, Any]:
    """A Pod as the ReplicaSet controller creates it: generateName, no name yet."""
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": generate_name,
            "namespace": "ml-serving",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": _owner(
                "ReplicaSet", generate_name.rstrip("-"), "5f0c2a7e-3b1d-4c8e-9a61-2d7f4b9e1c03"
            ),
        },
        "spec": spec,
    }


def gpu_pod() -> dict[str, Any]:
    labels = {**VLLM_LABELS, "pod-template-hash": "7c9d8f6b5"}
    return _rs_pod("vllm-llama-8b-7c9d8f6b5-", labels, VLLM_ANNOTATIONS, _vllm_spec(pod=True))


def gpu_pod_unique() -> dict[str, Any]:
    """The GPU pod with a name and a namespace of its own on every request (the client splices
    the uid in at each UID_MARK): against cluster facts with holds on, each admitted review
    adds a hold, as a busy cluster's would, across ever more namespaces."""
    pod = gpu_pod()
    meta = pod["metadata"]
    del meta["generateName"]
    meta["name"] = f"vllm-{UID_MARK}"
    meta["namespace"] = f"team-{UID_MARK}"
    return pod


def gpu_pod_denied() -> dict[str, Any]:
    """The GPU pod with its container privileged: denied by privileged-gpu, so each review
    writes a decision log line (what a denial storm, a controller retrying, costs per review)."""
    pod = gpu_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return pod


def gpu_pod_20() -> dict[str, Any]:
    """A pod of 20 containers: 8 GPU workers and 12 CPU sidecars (proxies, log shippers)."""
    pod = gpu_pod()
    workers = []
    for i in range(8):
        c = _vllm_container(pod=True)
        c["name"] = f"worker-{i}"
        workers.append(c)
    sidecars = []
    for i in range(12):
        c = _nginx_container()
        c["name"] = f"sidecar-{i}"
        sidecars.append(c)
    pod["spec"]["containers"] = workers + sidecars
    pod["spec"]["volumes"].append({"name": "conf", "configMap": {"name": "nginx-conf"}})
    return pod


def plain_pod() -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "nginx", "pod-template-hash": "6d4cf56db6"}
    annotations = {"kubectl.kubernetes.io/restartedAt": "2024-11-02T10:14:07Z"}
    spec = _pod_spec(
        [_nginx_container()], [{"name": "conf", "configMap": {"name": "nginx-conf"}}], pod=True
    )
    return _rs_pod("web-6d4cf56db6-", labels, annotations, spec)


def gpu_deployment() -> dict[str, Any]:
    """The Deployment behind gpu_pod(): same container, template defaults only."""
    return {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": "vllm-llama-8b",
            "namespace": "ml-serving",
            "labels": VLLM_LABELS,
            "annotations": {"argocd.argoproj.io/tracking-id": "ml:apps/Deployment:ml-serving/x"},
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": "llama-8b"}},
            "template": {
                "metadata": {"labels": VLLM_LABELS, "annotations": VLLM_ANNOTATIONS},
                "spec": _vllm_spec(pod=False),
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
    }


def review(obj: dict[str, Any], *, user: str, groups: list[str]) -> dict[str, Any]:
    """An admission.k8s.io/v1 CREATE review of `obj`, with UID_MARK where the uid goes."""
    group, _, version = obj["apiVersion"].rpartition("/")
    kind = obj["kind"]
    resource = {"group": group, "version": version, "resource": kind.lower() + "s"}
    gvk = {"group": group, "version": version, "kind": kind}
    meta = obj["metadata"]
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": UID_MARK,
            "kind": gvk,
            "resource": resource,
            "requestKind": gvk,
            "requestResource": resource,
            "name": meta.get("name", ""),
            "namespace": meta["namespace"],
            "operation": "CREATE",
            "userInfo": {
                "username": user,
                "uid": "c1a3e0f2-7d55-4f0e-b8a4-0e6b2f9d1a77",
                "groups": groups,
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


RS_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
SA_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
ARGOCD = "system:serviceaccount:argocd:argocd-application-controller"


@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[], dict[str, Any]]
    user: str
    groups: list[str]
    endpoints: tuple[str, ...]
    facts: bool = False  # served by the webhook with the example snapshot and holds on


SCENARIOS = (
    Scenario("gpu-pod", gpu_pod, RS_CONTROLLER, SA_GROUPS, ("mutate", "validate")),
    Scenario(
        "gpu-pod-facts", gpu_pod_unique, RS_CONTROLLER, SA_GROUPS, ("mutate", "validate"), True
    ),
    Scenario("gpu-pod-denied", gpu_pod_denied, RS_CONTROLLER, SA_GROUPS, ("validate",)),
    Scenario("gpu-deployment", gpu_deployment, ARGOCD, SA_GROUPS, ("mutate",)),
    Scenario("gpu-pod-20", gpu_pod_20, RS_CONTROLLER, SA_GROUPS, ("mutate", "validate")),
    Scenario("plain-pod", plain_pod, RS_CONTROLLER, SA_GROUPS, ("mutate", "validate")),
)


def as_persisted(obj: dict[str, Any], patch_b64: str | None) -> dict[str, Any]:
    """The object a validating webhook sees: mutations applied, name/uid/timestamp assigned.

    The apiserver calls validating webhooks after mutating ones and after generateName and
    uid are filled in, so /validate is benchmarked on that object, not on the raw one.
    """
    import jsonpatch  # a dependency of the webhook itself

    out = orjson.loads(orjson.dumps(obj))
    if patch_b64:
        out = jsonpatch.apply_patch(out, orjson.loads(base64.b64decode(patch_b64)))
    meta = out["metadata"]
    if "generateName" in meta and "name" not in meta:
        meta["name"] = meta["generateName"] + "x7k2p"
    meta.setdefault("uid", "0b6f7a52-9c3e-4d1a-8f25-6e4c1b7d9a30")
    meta.setdefault("creationTimestamp", "2024-11-02T10:14:09Z")
    return out
