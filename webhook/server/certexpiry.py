"""When the serving certificate expires, as a Prometheus gauge, so an alert can fire in time.

Read from the certificate file at scrape time (cached while the file is unchanged): the file
is what the server loads, and what cert-manager or `gpu-admission certs generate` renews.
"""

from __future__ import annotations

import math
from pathlib import Path

from cryptography import x509
from prometheus_client import Gauge

__all__ = ["CERT_EXPIRY", "cert_expiry_seconds", "watch_serving_cert"]

CERT_EXPIRY = Gauge(
    "gpu_admission_serving_cert_expiry_timestamp_seconds",
    "When the serving certificate file's certificate expires (Unix time; NaN when unreadable).",
)


def cert_expiry_seconds(cert: Path) -> float:
    """The first certificate's notAfter in `cert` as Unix time, NaN when it cannot be read."""
    try:
        return x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc.timestamp()
    except (OSError, ValueError):
        return math.nan


def watch_serving_cert(cert: Path) -> None:
    """Point the gauge at `cert`; it is read again only when the file's mtime changes."""
    seen: list[tuple[float, float]] = []  # (mtime, expiry) of the last read

    def expiry() -> float:
        try:
            mtime = cert.stat().st_mtime
        except OSError:
            return math.nan
        if not seen or seen[0][0] != mtime:
            seen[:] = [(mtime, cert_expiry_seconds(cert))]
        return seen[0][1]

    CERT_EXPIRY.set_function(expiry)
