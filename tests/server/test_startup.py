"""Start-up tells the truth: a missing certificate, a busy port or a missing rules folder is
one line naming the path or port, with a non-zero exit, or (for a rules folder a ConfigMap may
still bring) an error on every check and a /readyz that says why it is not ready."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.paths import ROOT
from tests.support.webhook import free_port


def _serve(certs: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1", "--probe-port", "0",
         "--drain-seconds", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )  # fmt: skip


def _tls(certs: Path) -> list[str]:
    return ["--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key")]


def test_a_missing_certificate_is_named_and_exits_2(certs: Path, tmp_path: Path) -> None:
    proc = _serve(
        certs, "--port", str(free_port()), "--rules", str(ROOT / "rules"),
        "--cert", str(tmp_path / "nope.crt"), "--key", str(certs / "tls.key"),
    )  # fmt: skip
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f"--cert {tmp_path / 'nope.crt'}: no such file" in err
    assert "gpu-admission certs generate --out certs" in err  # how to get a pair


def test_a_key_that_is_not_the_certificates_is_named(certs: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.key"
    wrong.write_text((certs / "ca.key").read_text())
    proc = _serve(
        certs, "--port", str(free_port()), "--rules", str(ROOT / "rules"),
        "--cert", str(certs / "tls.crt"), "--key", str(wrong),
    )  # fmt: skip
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and f"--key {wrong}: unusable" in err


def test_a_busy_port_is_named_and_exits_2(certs: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _serve(certs, "--port", str(port), "--rules", str(ROOT / "rules"), *_tls(certs))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}: the port is already in use" in err
    assert "serving on" not in err


def test_a_missing_rules_folder_keeps_it_unready_and_says_why(certs: Path, tmp_path: Path) -> None:
    port = free_port()
    missing = tmp_path / "rules"
    proc = _serve(
        certs, "--port", str(port), "--rules", str(missing), "--rules-check-seconds", "0.2",
        *_tls(certs),
    )  # fmt: skip
    try:
        trust = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        with httpx.Client(verify=trust) as client:
            deadline = time.monotonic() + 30
            while True:
                try:
                    ready = client.get(f"https://127.0.0.1:{port}/readyz")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the server never came up"
                    time.sleep(0.1)
            assert ready.status_code == 503 and "no valid rule set" in ready.text
            time.sleep(0.6)  # a few checks
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert err.count(f"rules folder {missing} does not exist") >= 2
