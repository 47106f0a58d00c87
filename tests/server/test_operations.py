"""Operating the server: certificate rotation and SIGTERM under load, client certificates,
and structured logs."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import signal
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.paths import ROOT
from tests.support.reviews import review_for
from tests.support.webhook import Webhook, start_webhook, stop_webhook
from webhook.certs.generate import generate

GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p"},
    "spec": {
        "containers": [{"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
    },
}


def load(hook: Webhook, ca_bundle: Path, stop: threading.Event, out: dict[str, Any]) -> None:
    """A client that keeps posting, reconnecting every 20 requests so it sees new certificates."""
    ctx = ssl.create_default_context(cafile=str(ca_bundle))
    ok = failed = 0
    serials: set[int] = set()
    while not stop.is_set():
        try:
            with httpx.Client(verify=ctx, timeout=10) as client:
                for _ in range(20):
                    review = review_for(GPU_POD)
                    resp = client.post(f"{hook.url}/mutate?timeout=10s", json=review)
                    assert resp.status_code == 200
                    assert resp.json()["response"]["uid"] == review["request"]["uid"]
                    ok += 1
                stream = resp.extensions["network_stream"]
                der = stream.get_extra_info("ssl_object").getpeercert(True)
                serials.add(x509.load_der_x509_certificate(der).serial_number)
        except (httpx.TransportError, AssertionError) as exc:
            failed += 1
            out.setdefault("errors", []).append(repr(exc))
    out.update(ok=ok, failed=failed, serials=serials)


def test_a_rotated_certificate_is_served_without_dropping_a_request(tmp_path: Path) -> None:
    old = generate(tmp_path / "old", ["127.0.0.1"])
    new = generate(tmp_path / "new", ["127.0.0.1"])
    live = tmp_path / "live"
    live.mkdir()
    for name in ("tls.crt", "tls.key", "ca.crt"):
        shutil.copy(tmp_path / "old" / name, live / name)
    bundle = tmp_path / "bundle.pem"  # the client trusts both CAs, as during a CA roll-over
    bundle.write_bytes(old.ca_cert.read_bytes() + new.ca_cert.read_bytes())
    hook = start_webhook(live, ROOT / "rules", tmp_path / "s.log", "--cert-check-seconds", "0.2")
    stop, result = threading.Event(), {}
    worker = threading.Thread(target=load, args=(hook, bundle, stop, result))
    worker.start()
    try:
        time.sleep(1.0)
        # cert-manager writes the new pair into the mounted Secret; the key first, as a kubelet
        # update may briefly show a mismatched pair.
        shutil.copy(new.key, live / "tls.key")
        shutil.copy(new.cert, live / "tls.crt")
        time.sleep(2.0)
    finally:
        stop.set()
        worker.join(30)
        stop_webhook(hook)
    new_serial = x509.load_pem_x509_certificate(new.cert.read_bytes()).serial_number
    assert result["failed"] == 0, result.get("errors")
    assert result["ok"] > 50
    assert new_serial in result["serials"]


def test_sigterm_drains_in_flight_requests(tmp_path: Path, certs: Path) -> None:
    hook = start_webhook(certs, ROOT / "rules", tmp_path / "s.log")
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    answered: list[int] = []
    refused: list[str] = []
    # Big reviews take a while to send and decode, so several are in flight at the signal.
    padding = "x" * (4 * 1024 * 1024)

    def post() -> None:
        review = review_for({**GPU_POD, "metadata": {"name": "p", "annotations": {"a": padding}}})
        try:
            with httpx.Client(verify=ctx, timeout=30) as client:
                resp = client.post(f"{hook.url}/mutate?timeout=10s", json=review)
                answered.append(resp.status_code)
        except httpx.ConnectError as exc:  # sent after the listener closed: never in flight
            refused.append(repr(exc))

    threads = [threading.Thread(target=post) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    hook.process.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    code = hook.process.wait(30)
    hook.client.close()
    assert code == 0
    assert answered, "some requests should have been in flight at SIGTERM"
    assert set(answered) == {200}
    assert len(answered) + len(refused) == 8


def _client_cert(folder: Path, ca_dir: Path) -> tuple[Path, Path]:
    """A client certificate signed by the test CA, as an apiserver's would be."""
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    (folder / "client.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "client.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return folder / "client.crt", folder / "client.key"


def test_with_a_client_ca_only_certified_clients_get_through(tmp_path: Path, certs: Path) -> None:
    crt, key = _client_cert(tmp_path, certs)
    hook = start_webhook(
        certs,
        ROOT / "rules",
        tmp_path / "s.log",
        "--client-ca",
        str(certs / "ca.crt"),
        client_cert=(crt, key),
    )
    try:
        anonymous_ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        with pytest.raises(httpx.TransportError), httpx.Client(verify=anonymous_ctx) as anonymous:
            anonymous.get(f"{hook.url}/healthz")
        assert hook.mutate(GPU_POD).allowed  # the hook's own client presents the certificate
    finally:
        stop_webhook(hook)


def test_decisions_are_logged_as_json_with_the_request_uid(tmp_path: Path, certs: Path) -> None:
    log = tmp_path / "s.log"
    hook = start_webhook(certs, ROOT / "rules", log, "--log-format", "json")
    try:
        bad = {
            **GPU_POD,
            "spec": {
                "containers": [
                    {"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "500m"}}}
                ]
            },
        }
        review = review_for(bad, uid="uid-1234")
        assert not hook.review("validate", review).allowed
    finally:
        stop_webhook(hook)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    decision = next(line for line in lines if line.get("event") == "admission")
    assert decision["uid"] == "uid-1234"
    assert decision["allowed"] is False
    assert {"rule": "gpu-whole-quantity", "mode": "enforce"}.items() <= decision["findings"][
        0
    ].items()
    assert all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)
