"""Generated certificates serve TLS that a client trusting only the CA accepts."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

from cryptography import x509

from webhook.certs.generate import SERVING_DAYS, generate


def test_serving_cert_names_every_host_and_is_signed_by_the_ca(tmp_path: Path) -> None:
    paths = generate(tmp_path, ["localhost", "127.0.0.1", "gpu-admission.gpu-admission.svc"])
    cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())

    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "localhost",
        "gpu-admission.gpu-admission.svc",
    ]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert dt.timedelta(days=SERVING_DAYS) <= lifetime <= dt.timedelta(days=SERVING_DAYS + 1)


def test_private_keys_are_readable_by_the_owner_only(tmp_path: Path) -> None:
    paths = generate(tmp_path, ["localhost"])
    for key in (paths.key, paths.ca_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
