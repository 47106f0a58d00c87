"""The CA bundle, put into the webhook configurations by `gpu-admission certs inject`: every
webhook gets it, nothing else changes, and what is not a certificate is refused."""

from __future__ import annotations

import base64
import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.support.manifests import K8S_VERSIONS, KUSTOMIZATIONS, render, webhook_entries
from webhook.certs.inject import inject_ca_bundle, inject_ca_bundle_file


def test_inject_ca_bundle_sets_the_bundle_on_every_webhook_and_nothing_else(ca_pem: bytes) -> None:
    docs = [copy.deepcopy(d) for d in render("base")]
    before = copy.deepcopy(docs)
    injected = inject_ca_bundle(docs, ca_pem)

    assert docs == before  # the input is left alone
    hooks = [
        h for d in injected if d["kind"].endswith("WebhookConfiguration") for h in d["webhooks"]
    ]
    assert len(hooks) == 3
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

    assert inject_ca_bundle_file(target, ca_pem) == 3

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
