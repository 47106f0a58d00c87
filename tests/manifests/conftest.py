"""The deployment manifests' topic: what `kubectl apply` gets, its certificates and its CA
bundle."""

from __future__ import annotations

import pytest

from webhook.certs.generate import generate


@pytest.fixture(scope="session")
def ca_pem(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A CA certificate as `certs generate` writes it, for `certs inject` to put in place."""
    paths = generate(tmp_path_factory.mktemp("ca"), ["gpu-admission.gpu-admission.svc"])
    return paths.ca_cert.read_bytes()
