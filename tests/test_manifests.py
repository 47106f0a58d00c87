"""The deployment manifests: schema-valid, least privilege, and webhooks that see the GPU workloads.

Every object of the base and both overlays is rendered the way it gets deployed (`kubectl
kustomize`, or the files one by one where kubectl is missing) and validated against the
Kubernetes OpenAPI schema of the oldest and newest supported release. The webhooks'
`matchConditions` are evaluated with a real CEL interpreter, against objects built for every
kind and against the corpus, with the webhook's own pod views as the judge of which objects
it must see.
"""

from __future__ import annotations

import base64
import copy
import fnmatch
import functools
import posixpath
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cel
import kubernetes_validate
import pytest
import yaml

from webhook.certinject import inject_ca_bundle, inject_ca_bundle_file
from webhook.config import RuleSet
from webhook.podviews import POD_SPEC_PATHS, group_of, pod_views
from webhook.rulefiles import load_rules, rule_files
from webhook.selectors import LabelSelector

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "manifests"
KUSTOMIZATIONS = {
    "base": MANIFESTS / "base",
    "cert-manager": MANIFESTS / "overlays" / "cert-manager",
    "self-signed": MANIFESTS / "overlays" / "self-signed",
}
# matchConditions are GA in 1.30: the oldest release these manifests support.
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())
CERT_MANAGER_KINDS = frozenset({"Issuer", "Certificate"})
NAMESPACE = "gpu-admission"
SERVICE_DNS = f"gpu-admission.{NAMESPACE}.svc"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl renders overlays' patches")

RULES: RuleSet = load_rules(ROOT / "rules")  # what the ConfigMap ships


# --- rendering ---------------------------------------------------------------------------------


def _files_of(folder: Path) -> list[dict[str, Any]]:
    """Without kubectl: the resources a kustomization lists, unpatched, plus its ConfigMaps."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        path = folder / entry
        if path.is_dir():
            docs += _files_of(path)
        else:
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for gen in kustomization.get("configMapGenerator", []):
        files = [folder / f for f in gen.get("files", [])]
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": gen["name"], "namespace": gen.get("namespace")},
                "data": {f.name: f.read_text() for f in files},
            }
        )
    return docs


@functools.cache
def render(name: str) -> tuple[dict[str, Any], ...]:
    """The objects a kustomization deploys, as `kubectl kustomize` renders them."""
    folder = KUSTOMIZATIONS[name]
    if KUBECTL is None:
        return tuple(_files_of(folder))
    result = subprocess.run(
        [KUBECTL, "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {folder} failed:\n{result.stderr}")
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def one(name: str, kind: str) -> dict[str, Any]:
    found = [d for d in render(name) if d["kind"] == kind]
    assert len(found) == 1, f"{name} renders {len(found)} {kind} objects, expected one"
    return found[0]


def webhook_entries(name: str = "base") -> list[tuple[str, dict[str, Any]]]:
    """(configuration kind, webhook) for every webhook in the rendered kustomization."""
    return [
        (doc["kind"], hook)
        for doc in render(name)
        if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in doc["webhooks"]
    ]


def _doc_id(name: str, doc: dict[str, Any]) -> str:
    return f"{name}:{doc['kind']}/{doc['metadata']['name']}"


# --- (a) every object is a valid Kubernetes object ----------------------------------------------


def _schema_cases() -> list[Any]:
    return [
        pytest.param(doc, version, id=f"{_doc_id(name, doc)}@{version}")
        for name in KUSTOMIZATIONS
        for doc in render(name)
        if doc["kind"] not in CERT_MANAGER_KINDS  # no schema for CRDs: checked below
        for version in K8S_VERSIONS
    ]


@pytest.mark.parametrize(("doc", "version"), _schema_cases())
def test_every_manifest_is_valid_against_the_kubernetes_schema(
    doc: dict[str, Any], version: str
) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


def test_the_base_holds_everything_but_the_certificates() -> None:
    assert sorted(d["kind"] for d in render("base")) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "MutatingWebhookConfiguration",
        "Namespace",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
        "ValidatingWebhookConfiguration",
    ]


@pytest.mark.parametrize("overlay", ["cert-manager", "self-signed"])
def test_an_overlay_deploys_everything_in_the_base(overlay: str) -> None:
    base = {(d["kind"], d["metadata"]["name"]) for d in render("base")}
    rendered = {(d["kind"], d["metadata"]["name"]) for d in render(overlay)}
    assert base <= rendered, f"{overlay} loses {sorted(base - rendered)}"


def test_cert_manager_issues_the_serving_certificate_the_deployment_mounts() -> None:
    docs = render("cert-manager")
    issuers = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Issuer"}
    certs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Certificate"}
    for doc in [*issuers.values(), *certs.values()]:
        assert doc["apiVersion"] == "cert-manager.io/v1"
        assert doc["metadata"]["namespace"] == NAMESPACE
    for issuer in issuers.values():
        kinds = set(issuer["spec"]) & {"selfSigned", "ca", "acme", "vault", "venafi"}
        assert len(kinds) == 1, f"Issuer {issuer['metadata']['name']} has {kinds}"
        if "ca" in issuer["spec"]:  # the CA Issuer signs with the key of the CA Certificate
            assert issuer["spec"]["ca"]["secretName"] in {
                c["spec"]["secretName"] for c in certs.values() if c["spec"].get("isCA")
            }
    for cert in certs.values():
        assert cert["spec"]["issuerRef"]["kind"] == "Issuer"
        assert cert["spec"]["issuerRef"]["name"] in issuers

    serving = [c for c in certs.values() if not c["spec"].get("isCA")]
    assert len(serving) == 1
    assert {SERVICE_DNS, f"{SERVICE_DNS}.cluster.local"} <= set(serving[0]["spec"]["dnsNames"])
    volumes = one("cert-manager", "Deployment")["spec"]["template"]["spec"]["volumes"]
    secrets = [v["secret"]["secretName"] for v in volumes if "secret" in v]
    assert secrets == [serving[0]["spec"]["secretName"]]


@needs_kubectl
def test_cainjector_is_told_to_fill_in_both_webhook_configurations() -> None:
    certs = {
        f"{d['metadata']['namespace']}/{d['metadata']['name']}": d
        for d in render("cert-manager")
        if d["kind"] == "Certificate"
    }
    configurations = [d for d in render("cert-manager") if d["kind"].endswith("Configuration")]
    assert len(configurations) == 2
    for doc in configurations:
        source = doc["metadata"].get("annotations", {}).get("cert-manager.io/inject-ca-from")
        assert source in certs, f"{doc['kind']} injects from {source!r}"
        assert not certs[source]["spec"].get("isCA")  # its ca.crt is the CA, stable on renewal


@needs_kubectl
def test_the_self_signed_overlay_gives_every_webhook_a_ca_bundle_to_fill_in() -> None:
    entries = webhook_entries("self-signed")
    assert len(entries) == len(webhook_entries("base")) == 2
    for _, hook in entries:
        assert "caBundle" in hook["clientConfig"], hook["name"]
        assert hook["clientConfig"]["service"]["name"] == "gpu-admission"


# --- the Deployment, its Service and RBAC -------------------------------------------------------


def _server() -> dict[str, Any]:
    """The webhook's own container."""
    (container,) = one("base", "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def _args() -> dict[str, str]:
    args = _server()["args"]
    assert args[0] == "serve"
    return dict(a.removeprefix("--").split("=", 1) for a in args[1:])


def test_the_deployment_runs_two_replicas_on_different_nodes_with_a_disruption_budget() -> None:
    deployment = one("base", "Deployment")
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = LabelSelector.model_validate(term["podAffinityTerm"]["labelSelector"])
    assert selector.matches(pod["metadata"]["labels"])

    pdb = one("base", "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert LabelSelector.model_validate(pdb["spec"]["selector"]).matches(pod["metadata"]["labels"])
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"


def test_the_container_is_non_root_read_only_and_without_capabilities() -> None:
    pod_spec = one("base", "Deployment")["spec"]["template"]["spec"]
    container = _server()
    security = container["securityContext"]
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["securityContext"]["runAsUser"] != 0
    assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert container["image"] == "ghcr.io/gpu-admission/gpu-admission:0.1.0"


@pytest.mark.parametrize(
    ("probe", "path"), [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")]
)
def test_probes_ask_the_server_over_https(probe: str, path: str) -> None:
    container = _server()
    get = container[probe]["httpGet"]
    assert (get["path"], get["scheme"]) == (path, "HTTPS")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[get["port"]] == int(_args()["port"]) == 8443


def test_the_server_reads_certificates_and_rules_where_they_are_mounted() -> None:
    mounts = {m["name"]: m["mountPath"] for m in _server()["volumeMounts"]}
    args = _args()
    assert mounts["tls"] == "/etc/gpu-admission/tls"
    assert args["cert"] == mounts["tls"] + "/tls.crt"
    assert args["key"] == mounts["tls"] + "/tls.key"
    assert args["rules"] == mounts["rules"] == "/etc/gpu-admission/rules"
    assert args["host"] == "0.0.0.0"
    assert all("subPath" not in m for m in _server()["volumeMounts"])  # else no hot reload


def test_the_rules_configmap_holds_every_rule_file_and_is_the_one_mounted() -> None:
    configmap = one("base", "ConfigMap")
    rules_dir = ROOT / "rules"
    assert configmap["data"] == {p.name: p.read_text() for p in rule_files(rules_dir)}
    volumes = one("base", "Deployment")["spec"]["template"]["spec"]["volumes"]
    (rules_volume,) = [v for v in volumes if v["name"] == "rules"]
    assert rules_volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert configmap["metadata"]["namespace"] == NAMESPACE


def test_the_service_sends_port_443_to_the_webhook_pods() -> None:
    service = one("base", "Service")
    pod = one("base", "Deployment")["spec"]["template"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443
    assert port["targetPort"] in {p["name"] for p in _server()["ports"]}
    assert LabelSelector.model_validate({"matchLabels": service["spec"]["selector"]}).matches(
        pod["metadata"]["labels"]
    )


def test_the_webhook_may_only_read_the_cluster() -> None:
    role = one("base", "ClusterRole")
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert set(granted) == {
        ("", "namespaces"),
        ("", "pods"),
        ("", "nodes"),
        ("", "resourcequotas"),
        ("scheduling.k8s.io", "priorityclasses"),
    }
    assert all(verbs == {"get", "list", "watch"} for verbs in granted.values())
    binding = one("base", "ClusterRoleBinding")
    account = one("base", "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    pod_spec = one("base", "Deployment")["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == account["metadata"]["name"]


# --- the webhook configurations -----------------------------------------------------------------

# What the webhook handles: (group, version, resource) -> operations. Pods on CREATE only: the
# engine judges no pod UPDATE, and with failurePolicy Fail an outage would block label changes.
ROUTED: dict[tuple[str, str, str], set[str]] = {("", "v1", "pods"): {"CREATE"}} | {
    (group, version, resource): {"CREATE", "UPDATE"}
    for group, version, resources in [
        ("", "v1", "replicationcontrollers podtemplates"),
        ("apps", "v1", "deployments statefulsets daemonsets replicasets"),
        ("batch", "v1", "jobs cronjobs"),
        ("ray.io", "v1", "rayclusters rayjobs rayservices"),
        ("kubeflow.org", "v1", "pytorchjobs tfjobs mpijobs xgboostjobs paddlejobs jaxjobs"),
        ("kubeflow.org", "v2beta1", "mpijobs"),
        ("serving.kserve.io", "v1beta1", "inferenceservices"),
        ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
        ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    ]
    for resource in resources.split()
}
# Kinds the pod views know that the webhook is deliberately not registered for.
NOT_ROUTED = {("batch.volcano.sh", "Job")}


def _routes(hook: dict[str, Any]) -> dict[tuple[str, str, str], set[str]]:
    routes: dict[tuple[str, str, str], set[str]] = {}
    for rule in hook["rules"]:
        assert rule["scope"] == "Namespaced"
        for group in rule["apiGroups"]:
            for version in rule["apiVersions"]:
                for resource in rule["resources"]:
                    routes.setdefault((group, version, resource), set()).update(rule["operations"])
    return routes


def _resource(kind: str) -> str:
    return kind.lower() + "s"  # true of every kind routed here


def routed(doc: Any) -> bool:
    """Whether the apiserver would send this object (on CREATE) to the webhooks."""
    if not isinstance(doc, dict) or not isinstance(doc.get("apiVersion"), str):
        return False
    group, _, version = doc["apiVersion"].rpartition("/")
    return "CREATE" in ROUTED.get((group, version, _resource(str(doc.get("kind")))), set())


def _webhook_params() -> list[Any]:
    return [pytest.param(kind, hook, id=hook["name"]) for kind, hook in webhook_entries()]


@pytest.mark.parametrize(("kind", "hook"), _webhook_params())
def test_each_webhook_is_routed_exactly_the_kinds_the_webhook_handles(
    kind: str, hook: dict[str, Any]
) -> None:
    assert _routes(hook) == ROUTED


def test_every_kind_the_pod_views_know_is_routed_unless_deliberately_not() -> None:
    routed_kinds = {(group, resource) for group, _, resource in ROUTED}
    unrouted = {(g, k) for g, k in POD_SPEC_PATHS if (g, _resource(k)) not in routed_kinds}
    assert unrouted == NOT_ROUTED


@pytest.mark.parametrize(("kind", "hook"), _webhook_params())
def test_each_webhook_speaks_v1_has_no_side_effects_and_times_out_in_5s(
    kind: str, hook: dict[str, Any]
) -> None:
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["timeoutSeconds"] == 5
    assert hook["matchPolicy"] == "Equivalent"
    service = one("base", "Service")
    assert hook["clientConfig"]["service"] == {
        "namespace": service["metadata"]["namespace"],
        "name": service["metadata"]["name"],
        "path": "/mutate" if kind.startswith("Mutating") else "/validate",
        "port": service["spec"]["ports"][0]["port"],
    }


def test_mutations_are_skipped_and_validations_refused_when_the_webhook_is_down() -> None:
    policies = {
        kind: (hook["failurePolicy"], hook.get("reinvocationPolicy"))
        for kind, hook in webhook_entries()
    }
    assert policies == {
        "MutatingWebhookConfiguration": ("Ignore", "IfNeeded"),
        "ValidatingWebhookConfiguration": ("Fail", None),
    }


def test_both_webhooks_select_the_same_objects() -> None:
    (_, mutating), (_, validating) = sorted(webhook_entries(), key=lambda e: e[0])
    for field in ("rules", "namespaceSelector", "matchConditions", "matchPolicy"):
        assert mutating[field] == validating[field], field


# --- (d) namespaces -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "sent"),
    [
        ("kube-system", False),
        (NAMESPACE, False),
        ("gpu-operator", False),
        ("ml-team", True),
        ("default", True),
    ],
)
def test_the_namespace_selector_leaves_out_system_gpu_operator_and_the_webhooks_own(
    namespace: str, sent: bool
) -> None:
    labels = {"kubernetes.io/metadata.name": namespace}  # set on every namespace since 1.22
    for _, hook in webhook_entries():
        assert LabelSelector.model_validate(hook["namespaceSelector"]).matches(labels) is sent


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
    resource = {"group": group, "version": version, "resource": _resource(kind["kind"])}
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
    "host-var-log": (_host("/var/log"), False),
    "host-dev-shm": (_host("/dev/shm"), False),
    "tolerates-nvidia-taint": (
        _tolerates(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
        True,
    ),
    "tolerates-amd-taint": (_tolerates(key="amd.com/gpu", operator="Exists"), True),
    "tolerates-every-taint": (_tolerates(operator="Exists"), False),
    "tolerates-another-taint": (_tolerates(key="dedicated", operator="Equal", value="x"), False),
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
}


def needs_webhook(obj: dict[str, Any], rules: RuleSet = RULES) -> bool:
    """The judge: the webhook's pod views, and the rule settings the webhook would act on."""
    group, kind = group_of(obj.get("apiVersion")), obj["kind"]
    taints = {t.key for t in rules.rules.gpu_tolerations.tolerations}
    for view in pod_views(obj, group=group, kind=kind, is_gpu=rules.is_gpu_resource):
        if view.asks_gpu:
            return True
        for c in view.containers:
            if any(e.get("name") == "NVIDIA_VISIBLE_DEVICES" for e in c.raw.get("env") or []):
                return True
        for volume in view.spec.get("volumes") or []:
            path = (volume.get("hostPath") or {}).get("path")
            if isinstance(path, str) and any(
                fnmatch.fnmatchcase(posixpath.normpath(path), pattern)
                for pattern in rules.rules.host_gpu_devices.paths
            ):
                return True
        if any(t.get("key") in taints for t in view.spec.get("tolerations") or []):
            return True
    return False


def test_every_routed_kind_has_an_example_here() -> None:
    built = {(group_of(make({})["apiVersion"]), make({})["kind"]) for make in KINDS.values()}
    assert built == set(POD_SPEC_PATHS) - NOT_ROUTED
    assert all(routed(make({})) for make in KINDS.values())


@pytest.mark.parametrize("spec_name", POD_SPECS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_match_conditions_select_exactly_the_pod_specs_the_webhook_must_see(
    kind: str, spec_name: str
) -> None:
    spec, expected = POD_SPECS[spec_name]
    obj = KINDS[kind](copy.deepcopy(spec))
    assert selects(obj) is expected
    # The example itself is right: the webhook's own pod views find the pod spec where it is.
    assert needs_webhook(obj) is expected


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


def _sample(pattern: str) -> str:
    return pattern.replace("*", "x0")


@pytest.mark.parametrize("pattern", RULES.gpu_resources)
def test_every_gpu_resource_of_the_rule_files_is_selected(pattern: str) -> None:
    obj = KINDS["Deployment"](_limits(_sample(pattern), "1"))
    assert RULES.is_gpu_resource(_sample(pattern))
    assert selects(obj) is True


@pytest.mark.parametrize("pattern", RULES.rules.host_gpu_devices.paths)
def test_every_host_device_path_of_the_rule_files_is_selected(pattern: str) -> None:
    assert selects(KINDS["Pod"](_host(_sample(pattern)))) is True


@pytest.mark.parametrize("key", [t.key for t in RULES.rules.gpu_tolerations.tolerations])
def test_every_gpu_taint_of_the_rule_files_is_selected(key: str) -> None:
    assert selects(KINDS["Pod"](_tolerates(key=key, operator="Exists"))) is True


# --- (b) against the corpus ---------------------------------------------------------------------


def _without_nulls(value: Any) -> Any:
    """What the apiserver hands CEL: typed decoding (built-in kinds) and pruning (CRDs) drop
    the nulls that an empty `resources:` or `env:` key leaves in a YAML file."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _corpus() -> list[tuple[str, dict[str, Any]]]:
    if not CORPUS.is_dir():
        return []
    docs = []
    for path in sorted(CORPUS.iterdir()):
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue  # a few files are broken as published
        for i, doc in enumerate(loaded):
            if isinstance(doc, dict):
                docs.append((f"{path.stem}#{i}-{doc.get('kind')}", _without_nulls(doc)))
    return docs


def _corpus_cases(only_routed: bool) -> list[Any]:
    docs = _corpus()
    if not docs:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{CORPUS} is absent"))]
    cases = []
    for doc_id, doc in docs:
        if only_routed and not routed(doc):
            continue
        cases.append(pytest.param(doc, id=doc_id))
    return cases


@pytest.mark.parametrize("doc", _corpus_cases(only_routed=False))
def test_the_match_conditions_evaluate_without_error_on_every_corpus_object(
    doc: dict[str, Any],
) -> None:
    # A missing has() guard or a type mismatch raises here; in the apiserver an evaluation
    # error counts as a webhook failure (and refuses the object under failurePolicy Fail).
    selects(doc)
    selects(doc, operation="UPDATE", old=doc)


@pytest.mark.parametrize("doc", _corpus_cases(only_routed=True))
def test_the_match_conditions_send_a_corpus_object_exactly_when_the_webhook_needs_it(
    doc: dict[str, Any],
) -> None:
    assert selects(doc) is needs_webhook(doc)


def test_the_corpus_has_objects_on_both_sides_of_the_match_conditions() -> None:
    docs = [doc for _, doc in _corpus() if routed(doc)]
    if not docs:
        pytest.skip(f"{CORPUS} is absent")
    chosen = [selects(doc) for doc in docs]
    assert sum(chosen) >= 20, "too few GPU objects: the corpus test above proves little"
    assert len(chosen) - sum(chosen) >= 5, "too few non-GPU objects to show any are left out"


# --- (c) the CA bundle --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    from webhook.certs import generate

    paths = generate(tmp_path_factory.mktemp("ca"), ["gpu-admission.gpu-admission.svc"])
    return paths.ca_cert.read_bytes()


def test_inject_ca_bundle_sets_the_bundle_on_every_webhook_and_nothing_else(ca_pem: bytes) -> None:
    docs = [copy.deepcopy(d) for d in render("base")]
    before = copy.deepcopy(docs)
    injected = inject_ca_bundle(docs, ca_pem)

    assert docs == before  # the input is left alone
    hooks = [
        h for d in injected if d["kind"].endswith("WebhookConfiguration") for h in d["webhooks"]
    ]
    assert len(hooks) == 2
    for hook in hooks:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_pem
        assert hook["clientConfig"]["service"]["name"] == "gpu-admission"
    others = [d for d in injected if not d["kind"].endswith("WebhookConfiguration")]
    assert others == [d for d in before if not d["kind"].endswith("WebhookConfiguration")]
    for doc in injected:
        if doc["kind"].endswith("WebhookConfiguration"):
            kubernetes_validate.validate(doc, K8S_VERSIONS[0], strict=True)


def test_inject_ca_bundle_refuses_what_is_not_a_certificate() -> None:
    with pytest.raises(ValueError, match="not a PEM certificate"):
        inject_ca_bundle(list(render("base")), b"-----BEGIN PRIVATE KEY-----\nAAAA\n")


def test_inject_ca_bundle_file_fills_in_the_self_signed_patch_and_keeps_its_header(
    ca_pem: bytes, tmp_path: Path
) -> None:
    source = KUSTOMIZATIONS["self-signed"] / "webhooks-cabundle.yaml"
    target = tmp_path / source.name
    target.write_text(source.read_text())

    assert inject_ca_bundle_file(target, ca_pem) == 2

    text = target.read_text()
    assert text.startswith(source.read_text().split("\n---", 1)[0])  # the how-to comment
    docs = list(yaml.safe_load_all(text))
    names = {(d["kind"], h["name"]) for d in docs for h in d["webhooks"]}
    assert names == {(kind, h["name"]) for kind, h in webhook_entries()}
    for doc in docs:
        for hook in doc["webhooks"]:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_pem


def test_inject_ca_bundle_file_says_so_when_the_file_has_no_webhook(
    ca_pem: bytes, tmp_path: Path
) -> None:
    target = tmp_path / "service.yaml"
    target.write_text((KUSTOMIZATIONS["base"] / "service.yaml").read_text())
    with pytest.raises(ValueError, match="no webhook"):
        inject_ca_bundle_file(target, ca_pem)
    assert target.read_text() == (KUSTOMIZATIONS["base"] / "service.yaml").read_text()
