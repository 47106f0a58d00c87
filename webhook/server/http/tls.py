"""The serving TLS context: what the listener's handshakes accept."""

from __future__ import annotations

import ssl
from pathlib import Path

# Go's crypto/tls offers these under TLS 1.2 too; CBC suites (Lucky13-style padding oracles)
# and non-forward-secret RSA key exchange are left out. TLS 1.3 suites are all AEAD and are
# configured separately by OpenSSL, so this string does not touch them.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def make_ssl_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """TLS 1.2+ with AEAD suites only; with `client_ca`, only clients holding a certificate it
    signed get through (the apiserver presents one when its admission config names one)."""
    for flag, path in (("--cert", cert), ("--key", key), ("--client-ca", client_ca)):
        if path is not None and not path.is_file():
            hint = (
                "; for a try-out, `gpu-admission certs generate --out certs` writes a dev CA and "
                "serving pair there (make run does), else point --cert and --key at yours"
                if flag != "--client-ca"
                else ""
            )
            raise ValueError(f"{flag} {path}: no such file{hint}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_COMPRESSION
    # HTTP/1.1 is all the server speaks: a client that offers h2 too settles on it, one that
    # offers h2 alone gets no protocol agreed rather than a promise the server cannot keep.
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as exc:  # not PEM, or a key that is not the certificate's
        raise ValueError(f"--cert {cert} / --key {key}: unusable ({exc.reason})") from None
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=client_ca)
        except ssl.SSLError as exc:
            raise ValueError(f"--client-ca {client_ca}: unusable ({exc.reason})") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
