"""The release manifest and plain kustomize: `kubectl apply -f dist/install.yaml` and
`kubectl apply -k manifests/overlays/<name>` work as they are (no load restrictor), and the
one file is the self-signed overlay rendered (`make dist`)."""

from __future__ import annotations

import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.manifests import K8S_VERSIONS, KUSTOMIZATIONS, ROOT, render, require_kubectl


@pytest.fixture
def kubectl() -> str:
    return require_kubectl("the overlays' rendering")


needs_kubectl = pytest.mark.usefixtures("kubectl")


DIST = ROOT / "dist" / "install.yaml"


def _dist_docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(DIST.read_text()) if d]


@needs_kubectl
def test_the_release_manifest_is_the_self_signed_overlay_rendered() -> None:
    assert _dist_docs() == list(render("self-signed")), "regenerate it: make dist"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_of_the_release_manifest_is_valid(version: str) -> None:
    docs = _dist_docs()
    assert {d["kind"] for d in docs} >= {"Deployment", "ValidatingWebhookConfiguration"}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


@needs_kubectl
@pytest.mark.parametrize("overlay", ["cert-manager", "self-signed"])
def test_plain_kubectl_kustomize_renders_each_overlay(overlay: str, kubectl: str) -> None:
    # `kubectl apply -k` renders the same way: no load restrictor, no files outside the folder.
    result = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZATIONS[overlay])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
