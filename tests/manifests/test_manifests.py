"""The deployment manifests: schema-valid, least privilege, and correctly wired webhooks.

Every object of the base and both overlays is rendered the way it gets deployed (`kubectl
kustomize`, or the files one by one where kubectl is missing) and validated against the
Kubernetes OpenAPI schema of the oldest and newest supported release. The Deployment, its
Service and RBAC, the webhook configurations, their namespace selector and the CA bundle
injection are checked here; the webhooks' `matchConditions` in tests/routing/.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from tests.support.manifests import (
    CERT_MANAGER_KINDS,
    CLUSTER_SCOPED,
    K8S_VERSIONS,
    KUSTOMIZATIONS,
    NAMESPACE,
    NOT_ROUTED,
    ROOT,
    ROUTED,
    RULES,
    SERVICE_DNS,
    config_map_hook,
    one,
    pod_webhook_entries,
    render,
    require_kubectl,
    webhook_entries,
)
from webhook.engine.compiled import compile_rules
from webhook.engine.workloads import DEFAULT_TABLE
from webhook.rulecli.webhookyaml import render_webhooks
from webhook.ruleset.files import load_rules, rule_files
from webhook.selectors import LabelSelector


@pytest.fixture
def kubectl() -> str:
    """Renderings are checked only as kubectl makes them: without it, the files would be
    checked unpatched (skipped, with the reason; in CI a failure)."""
    return require_kubectl("the manifests as `kubectl apply -k` deploys them")


needs_kubectl = pytest.mark.usefixtures("kubectl")


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


@needs_kubectl
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
        "NetworkPolicy",
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
    assert len(entries) == len(webhook_entries("base")) == 3
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


def _ports() -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in _server()["ports"]}


@pytest.mark.parametrize(
    ("probe", "path"), [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")]
)
def test_probes_ask_the_probe_port_over_plain_http(probe: str, path: str) -> None:
    """Not the webhook port: with --client-ca there, the kubelet (no client certificate)
    would be locked out."""
    get = _server()[probe]["httpGet"]
    assert (get["path"], get["scheme"]) == (path, "HTTP")
    assert _ports()[get["port"]] == int(_args()["probe-port"]) == 8081


def test_the_container_declares_the_webhook_and_probe_ports_the_server_listens_on() -> None:
    assert _ports() == {"https": int(_args()["port"]), "http-metrics": int(_args()["probe-port"])}
    assert _ports()["https"] == 8443
    annotations = one("base", "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(_ports()["http-metrics"])


def test_the_deployment_args_are_what_serve_accepts() -> None:
    from webhook.cli import build_parser

    args = build_parser().parse_args(_server()["args"])
    assert args.probe_port == 8081 and args.drain_seconds > 0
    grace = one("base", "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # Drain delay, then requests in flight: each bounded by the body timeout plus 5 s.
    assert args.drain_seconds + args.body_timeout + 5 < grace
    assert "lifecycle" not in _server()  # the server drains by itself: no preStop sleep


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
    rules_dir = ROOT / "manifests" / "base" / "rules"
    assert configmap["data"] == {p.name: p.read_text() for p in rule_files(rules_dir)}
    assert load_rules(rules_dir) is not None  # a valid rule set, laid over the defaults
    volumes = one("base", "Deployment")["spec"]["template"]["spec"]["volumes"]
    (rules_volume,) = [v for v in volumes if v["name"] == "rules"]
    assert rules_volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert configmap["metadata"]["namespace"] == NAMESPACE


def test_the_service_sends_port_443_to_the_webhook_pods() -> None:
    service = one("base", "Service")
    pod = one("base", "Deployment")["spec"]["template"]
    (port,) = service["spec"]["ports"]  # the webhook port only, never the probe port
    assert port["port"] == 443
    assert _ports()[port["targetPort"]] == int(_args()["port"])
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
        ("", "configmaps"),  # only keys that could become NVIDIA_VISIBLE_DEVICES are kept
        ("scheduling.k8s.io", "priorityclasses"),
        ("karpenter.sh", "nodepools"),  # what the cluster can create: GPU pools at zero
        ("cluster.x-k8s.io", "machinesets"),
        ("cluster.x-k8s.io", "machinedeployments"),
        ("cluster.x-k8s.io", "machinepools"),
        ("resource.k8s.io", "deviceclasses"),  # DRA: which pods' claims are GPU claims
        ("resource.k8s.io", "resourceclaimtemplates"),
        ("resource.k8s.io", "resourceclaims"),
        ("resource.k8s.io", "resourceslices"),  # GPUs served through DRA, per node
        ("serving.kserve.io", "servingruntimes"),  # whether a runtime brings /dev/shm
        ("serving.kserve.io", "clusterservingruntimes"),
        ("kueue.x-k8s.io", "localqueues"),  # gpu-queue: which queues exist, their quotas
        ("kueue.x-k8s.io", "clusterqueues"),
        ("kueue.x-k8s.io", "resourceflavors"),
        ("scheduling.run.ai", "queues"),  # KAI Scheduler's / Run:ai's queues
        # how long the admission chain may keep a pod create waiting: GPU holds outlast it
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
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


# --- the NetworkPolicy ---------------------------------------------------------------------------


def _policy() -> dict[str, Any]:
    return one("base", "NetworkPolicy")


def _container_port(port: int | str) -> int:
    return _ports()[port] if isinstance(port, str) else port


def test_the_network_policy_covers_the_webhook_pods_both_ways() -> None:
    policy = _policy()
    pod = one("base", "Deployment")["spec"]["template"]
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert LabelSelector.model_validate(policy["spec"]["podSelector"]).matches(
        pod["metadata"]["labels"]
    )
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]


def test_the_webhook_port_is_open_to_any_source_and_the_probe_port_only_to_monitoring() -> None:
    """The apiserver's addresses are provider-specific, so the webhook port takes any source;
    the probe and metrics port only the monitoring namespace (the kubelet is the node)."""
    opened: dict[int, list[Any]] = {}
    for rule in _policy()["spec"]["ingress"]:
        for port in rule["ports"]:
            assert port.get("protocol", "TCP") == "TCP"
            opened.setdefault(_container_port(port["port"]), []).append(rule.get("from"))
    assert opened == {
        int(_args()["port"]): [None],
        int(_args()["probe-port"]): [
            [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
        ],
    }


def test_egress_is_the_api_server_and_dns_only() -> None:
    allowed = set()
    for rule in _policy()["spec"]["egress"]:
        assert "to" not in rule  # addresses are provider-specific; the ports are not
        allowed |= {(p["port"], p.get("protocol", "TCP")) for p in rule["ports"]}
    assert allowed == {(443, "TCP"), (6443, "TCP"), (53, "UDP"), (53, "TCP")}


# --- the webhook configurations -----------------------------------------------------------------


def _routes(hook: dict[str, Any]) -> dict[tuple[str, str, str], set[str]]:
    routes: dict[tuple[str, str, str], set[str]] = {}
    for rule in hook["rules"]:
        for group in rule["apiGroups"]:
            expected = {
                "Cluster" if (group, r) in CLUSTER_SCOPED else "Namespaced"
                for r in rule["resources"]
            }
            assert {rule["scope"]} == expected, rule
            for version in rule["apiVersions"]:
                for resource in rule["resources"]:
                    routes.setdefault((group, version, resource), set()).update(rule["operations"])
    return routes


def _webhook_params() -> list[Any]:
    return [pytest.param(kind, hook, id=hook["name"]) for kind, hook in pod_webhook_entries()]


@pytest.mark.parametrize(("kind", "hook"), _webhook_params())
def test_each_webhook_is_routed_exactly_the_kinds_the_webhook_handles(
    kind: str, hook: dict[str, Any]
) -> None:
    assert _routes(hook) == ROUTED


def test_every_kind_the_pod_views_know_is_routed_unless_deliberately_not() -> None:
    routed_kinds = {(group, resource) for group, _, resource in ROUTED}
    unrouted = {
        (w.group, w.kind)
        for w in DEFAULT_TABLE.kinds
        if (w.group, w.declared.resource) not in routed_kinds
    }
    assert unrouted == NOT_ROUTED


def test_the_shipped_webhook_configurations_are_the_ones_generated_from_the_shipped_rules() -> None:
    """manifests/base/webhooks.yaml is `gpu-admission rules webhooks --rules
    manifests/base/rules` (the rules the ConfigMap deploys), byte for byte:
    a rule-file change that routes or selects more must be regenerated, never hand-edited."""
    shipped = (ROOT / "manifests" / "base" / "webhooks.yaml").read_text()
    assert shipped == render_webhooks(compile_rules(RULES)), (
        "regenerate: gpu-admission rules webhooks --rules manifests/base/rules "
        "> manifests/base/webhooks.yaml"
    )


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
        for kind, hook in pod_webhook_entries()
    }
    assert policies == {
        "MutatingWebhookConfiguration": ("Ignore", "IfNeeded"),
        "ValidatingWebhookConfiguration": ("Fail", None),
    }


def test_the_config_map_webhook_is_validating_only_and_fails_closed() -> None:
    """A sharing scheduler's device list is an isolation boundary: refused when the webhook is
    down, for every writer but the scheduler's binder, which is never sent."""
    kinds = {k for k, h in webhook_entries() if h["name"] == "configmaps.gpu-admission.io"}
    assert kinds == {"ValidatingWebhookConfiguration"}
    hook = config_map_hook()
    assert _routes(hook) == {("", "v1", "configmaps"): {"CREATE", "UPDATE"}}
    assert (
        hook["failurePolicy"] == "Fail" and hook["clientConfig"]["service"]["path"] == "/validate"
    )
    (_, validating) = next(e for e in pod_webhook_entries() if e[0].startswith("Validating"))
    assert hook["namespaceSelector"] == validating["namespaceSelector"]
    writers = RULES.gpu_sharing.config_map_writers
    assert writers and all(w in hook["matchConditions"][0]["expression"] for w in writers)


def test_both_webhooks_select_the_same_objects() -> None:
    (_, mutating), (_, validating) = sorted(pod_webhook_entries(), key=lambda e: e[0])
    for field in ("rules", "namespaceSelector", "matchConditions", "matchPolicy"):
        assert mutating[field] == validating[field], field


# --- (d) namespaces -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "sent"),
    [
        ("kube-system", False),
        (NAMESPACE, False),
        # A GPU component's namespace is sent: only the component's own pods skip the
        # GPU-access rules there, and a tenant may have created one of those names.
        ("gpu-operator", True),
        ("kai-scale-adjust", True),
        ("ml-team", True),
        ("default", True),
    ],
)
def test_the_namespace_selector_leaves_out_only_system_and_the_webhooks_own(
    namespace: str, sent: bool
) -> None:
    labels = {"kubernetes.io/metadata.name": namespace}  # set on every namespace since 1.22
    for _, hook in webhook_entries():
        assert LabelSelector.model_validate(hook["namespaceSelector"]).matches(labels) is sent
