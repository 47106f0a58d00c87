"""The control plane's certificates, as envtest makes them: the CA and the apiserver's serving
certificate from the product's own `certs generate`, an admin client certificate (group
system:masters) signed by that CA, and the service-account signing key pair. Everything lives
in the run's temp folder and dies with it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.certs.generate import generate

# loopback, the first address of the service range, and the in-cluster names of the apiserver
SERVER_HOSTS = [
    "127.0.0.1",
    "localhost",
    "10.0.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
]


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make(folder: Path) -> Pki:
    served = generate(folder, SERVER_HOSTS)
    ca_key = serialization.load_pem_private_key(served.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca = x509.load_pem_x509_certificate(served.ca_cert.read_bytes())
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "e2e-admin"),
                ]
            )
        )
        .issuer_name(ca.subject)
        .public_key(admin_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = Pki(
        ca_cert=served.ca_cert,
        server_cert=served.cert,
        server_key=served.key,
        admin_cert=folder / "admin.crt",
        admin_key=folder / "admin.key",
        sa_key=folder / "sa.key",
        sa_pub=folder / "sa.pub",
    )
    pki.admin_cert.write_bytes(admin.public_bytes(serialization.Encoding.PEM))
    pki.admin_key.write_bytes(_pem_key(admin_key))
    pki.sa_key.write_bytes(_pem_key(sa))
    pki.sa_pub.write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
