"""Shared by the manifest tests: the kustomizations rendered as deployed, and what is routed.

`render()` gives the objects of the base and both overlays the way they get deployed (`kubectl
kustomize`; where kubectl is missing, the files one by one, unpatched, which the tests that
check a rendering refuse through `require_kubectl`); ROUTED is what the webhook handles, and
`routed()` whether the apiserver would send an object to the webhooks at all.
Used by the manifest tests (tests/manifests/) and the routing tests (tests/routing/).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.e2e.binaries import RELEASES, bin_dir
from tests.support.paths import ROOT
from webhook.ruleset.files import load_rules
from webhook.ruleset.models import RuleSet

MANIFESTS = ROOT / "manifests"
CORPUS = ROOT.parent / "shared" / "corpus" / "manifests"
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


def _kubectl() -> str | None:
    """The kubectl the control plane build made (the newest pinned release: what CI renders
    with, `make test-packages` builds it), else one on PATH."""
    built = bin_dir(RELEASES[-1]) / "kubectl"
    return str(built) if built.is_file() else shutil.which("kubectl")


KUBECTL = _kubectl()


def require_kubectl(what: str) -> str:
    """kubectl, for a test that checks what it renders (`what`): skipped without it, with the
    reason, except in CI (CI set), where it fails."""
    if KUBECTL is None:
        reason = f"kubectl is not installed, so {what} is not checked: run `make test-packages`"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run every test, but {reason}")
        pytest.skip(reason)
    return KUBECTL


RULES: RuleSet = load_rules(ROOT / "manifests" / "base" / "rules")  # what the ConfigMap ships


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
        [KUBECTL, "kustomize", str(folder)],  # plain: what `kubectl apply -k` renders
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


# The validating webhook on ConfigMap writes (a sharing scheduler's device lists); the others
# route pod specs.
CONFIG_MAP_HOOK = "configmaps.gpu-admission.io"


def pod_webhook_entries(name: str = "base") -> list[tuple[str, dict[str, Any]]]:
    """`webhook_entries` of the two webhooks that route pod specs."""
    return [(k, h) for k, h in webhook_entries(name) if h["name"] != CONFIG_MAP_HOOK]


def config_map_hook(name: str = "base") -> dict[str, Any]:
    (hook,) = [h for _, h in webhook_entries(name) if h["name"] == CONFIG_MAP_HOOK]
    return hook


# --- what the webhooks are registered for ------------------------------------------------------

# What the webhook handles: (group, version, resource) -> operations. Pods on CREATE only: the
# engine judges no pod UPDATE, and with failurePolicy Fail an outage would block label changes.
# Ephemeral containers (kubectl debug) on UPDATE of their subresource: a way to GPU devices.
ROUTED: dict[tuple[str, str, str], set[str]] = {
    ("", "v1", "pods"): {"CREATE"},
    ("", "v1", "pods/ephemeralcontainers"): {"UPDATE"},
} | {
    (group, version, resource): {"CREATE", "UPDATE"}
    for group, version, resources in [
        ("", "v1", "replicationcontrollers podtemplates"),
        ("apps", "v1", "deployments statefulsets daemonsets replicasets"),
        ("batch", "v1", "jobs cronjobs"),
        ("ray.io", "v1", "rayclusters rayjobs rayservices"),
        ("kubeflow.org", "v1", "pytorchjobs tfjobs mpijobs xgboostjobs paddlejobs jaxjobs"),
        ("kubeflow.org", "v2beta1", "mpijobs"),
        ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes clustertrainingruntimes trainjobs"),
        ("serving.kserve.io", "v1beta1", "inferenceservices"),
        ("serving.kserve.io", "v1alpha1", "servingruntimes clusterservingruntimes"),
        ("serving.kserve.io", "v1alpha1", "llminferenceservices"),
        ("serving.kserve.io", "v1alpha2", "llminferenceservices"),
        ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
        ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
        ("batch.volcano.sh", "v1alpha1", "jobs"),
        ("apps.nvidia.com", "v1alpha1", "nimservices nimpipelines"),
        ("disaggregatedset.x-k8s.io", "v1", "disaggregatedsets"),
        ("workloads.x-k8s.io", "v1alpha1", "rolebasedgroups"),
        ("workloads.x-k8s.io", "v1alpha2", "rolebasedgroups"),
        ("kaito.sh", "v1alpha1", "workspaces inferencesets"),
        ("kaito.sh", "v1beta1", "workspaces inferencesets"),
    ]
    for resource in resources.split()
}
# Kinds the pod views know that the webhook is deliberately not registered for.
NOT_ROUTED: set[tuple[str, str]] = set()
# Cluster-scoped kinds: their webhook rules say `scope: Cluster`.
CLUSTER_SCOPED = {
    ("trainer.kubeflow.org", "clustertrainingruntimes"),
    ("serving.kserve.io", "clusterservingruntimes"),
}


def resource_of(kind: str) -> str:
    return kind.lower() + "s"  # true of every kind routed here


def routed(doc: Any) -> bool:
    """Whether the apiserver would send this object (on CREATE) to the webhooks."""
    if not isinstance(doc, dict) or not isinstance(doc.get("apiVersion"), str):
        return False
    group, _, version = doc["apiVersion"].rpartition("/")
    return "CREATE" in ROUTED.get((group, version, resource_of(str(doc.get("kind")))), set())
