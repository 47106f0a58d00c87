"""Development and self-signed-overlay certificates: a small CA and one serving certificate.

In a cluster cert-manager is the better source; this covers laptops, CI and the self-signed
overlay, with the same file names a `kubernetes.io/tls` Secret mounts (tls.crt, tls.key, ca.crt).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CA_DAYS", "SERVING_DAYS", "CertPaths", "generate"]

CA_DAYS = 5 * 365
SERVING_DAYS = 365  # short enough to rotate yearly, long enough not to break a dev setup


@dataclass(frozen=True)
class CertPaths:
    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path

    @classmethod
    def in_folder(cls, folder: Path) -> CertPaths:
        return cls(folder / "ca.crt", folder / "ca.key", folder / "tls.crt", folder / "tls.key")

    def complete(self) -> bool:
        return all(p.is_file() for p in (self.ca_cert, self.cert, self.key))


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpu-admission"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def generate(folder: Path, hosts: list[str], *, now: dt.datetime | None = None) -> CertPaths:
    """Write a fresh CA and a serving certificate for `hosts` (DNS names or IPs) into `folder`."""
    if not hosts:
        raise ValueError("at least one host name or IP address is needed for the certificate")
    folder.mkdir(parents=True, exist_ok=True)
    paths = CertPaths.in_folder(folder)
    now = now or dt.datetime.now(dt.UTC)
    start = now - dt.timedelta(minutes=5)  # tolerate small clock skew between nodes

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("gpu-admission CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + dt.timedelta(days=SERVING_DAYS))
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    _write_key(paths.ca_key, ca_key)
    paths.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(paths.key, key)
    # The serving cert alone: the CA signs it directly, and clients trust the CA (caBundle).
    paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return paths
