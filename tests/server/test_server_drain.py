"""SIGTERM under load cuts no request: the real server process, keep-alive clients, a signal.

The server is started as a Deployment runs it: `python -m webhook serve` with the webhook port
and a separate probe port. Four clients send reviews back to back over keep-alive
connections, as the apiserver does, while one more request sits half-sent; then SIGTERM.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.paths import ROOT, SNAPSHOT
from tests.support.rawhttp import GPU_POD
from tests.support.reviews import review_for

DRAIN = 0.5
PATIENCE = 15.0  # reached only when a test fails

BODY = json.dumps(review_for(GPU_POD)).encode()
HEADERS = {"Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    probe_port: int
    log: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def probe(self, path: str) -> int:
        try:
            return httpx.get(f"http://127.0.0.1:{self.probe_port}{path}", timeout=2).status_code
        except httpx.TransportError:
            return 0


@pytest.fixture
def server(certs: Path, tmp_path: Path) -> Iterator[Server]:
    port, probe_port = free_port(), free_port()
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1",
             "--port", str(port), "--probe-port", str(probe_port),
             "--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key"),
             "--rules", str(ROOT / "rules"), "--drain-seconds", str(DRAIN),
             "--cluster-snapshot", str(SNAPSHOT),
             "--log-format", "json"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    started = Server(process, port, probe_port, log)
    try:
        deadline = time.monotonic() + PATIENCE
        while started.probe("/readyz") != 200:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield started
    finally:  # reaped however the test ends: a Popen left running is a ResourceWarning
        if process.poll() is None:
            process.kill()
        process.wait()


@dataclass
class Sent:
    written: float  # wall clock once the whole request was written (comparable to the log)
    started: float  # wall clock before it was sent: the server cannot have read it earlier
    outcome: str  # the HTTP status, "refused" (never sent: no connection), or the error
    closing: bool  # the answer said Connection: close


def keep_sending(server: Server, ctx: ssl.SSLContext, sent: list[Sent]) -> None:
    """Reviews back to back on a keep-alive connection (a new one after Connection: close),
    until a new connection is refused: the listener is gone."""
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=PATIENCE)
    while True:
        started = time.time()
        try:
            conn.request("POST", "/validate?timeout=10s", body=BODY, headers=HEADERS)
        except OSError:  # connecting failed, nothing was sent
            sent.append(Sent(time.time(), started, "refused", False))
            conn.close()
            return
        written = time.time()
        try:
            resp = conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException) as exc:
            sent.append(Sent(written, started, type(exc).__name__, False))
            conn.close()
            continue
        closing = resp.getheader("connection") == "close"
        sent.append(Sent(written, started, str(resp.status), closing))


LOG_RESOLUTION = 0.001  # the JSON log's timestamps, to the millisecond


def logged_at(log: Path, message: str) -> float:
    """When the server logged `message` (JSON log, UTC, to the millisecond: never later)."""
    for line in log.read_text().splitlines():
        if line.startswith("{") and (entry := json.loads(line))["msg"].startswith(message):
            return dt.datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
    raise AssertionError(f"{message!r} not in the log:\n{log.read_text()}")


def test_sigterm_fails_readiness_first_then_drains_without_cutting_a_request(
    server: Server, certs: Path
) -> None:
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    sent: list[Sent] = []
    clients = [threading.Thread(target=keep_sending, args=(server, ctx, sent)) for _ in range(4)]
    for thread in clients:
        thread.start()
    # One more request, in flight across the whole shutdown: its head and half its body now.
    half = len(BODY) // 2
    raw = ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", server.port)), server_hostname="127.0.0.1"
    )
    raw.sendall(
        f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n".encode()
        + BODY[:half]
    )
    deadline = time.monotonic() + PATIENCE
    while len(sent) < 20:
        assert time.monotonic() < deadline, (
            f"only {len(sent)} reviews answered:\n{server.log.read_text()}"
        )
        time.sleep(0.01)
    metrics = httpx.get(f"http://127.0.0.1:{server.probe_port}/metrics", timeout=2).text
    assert "\ngpu_admission_gpu_holds " in metrics  # the snapshot's holds, exported

    server.process.send_signal(signal.SIGTERM)
    # Probe until readiness fails or the probe port goes (a loaded machine may be slow to
    # deliver the signal): it must fail while the webhook still serves.
    readiness = []
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        readiness.append(server.probe("/readyz"))
        if readiness[-1] != 200:
            break
        time.sleep(0.01)
    for thread in clients:
        thread.join(PATIENCE)
    assert not any(t.is_alive() for t in clients), "clients never saw the listener close"

    raw.sendall(BODY[half:])  # after the listener closed: the request in flight still finishes
    raw.settimeout(PATIENCE)
    answer = b""
    while chunk := raw.recv(65536):
        answer += chunk
    raw.close()
    assert server.process.wait(PATIENCE) == 0, server.log.read_text()

    closed = logged_at(server.log, "no longer accepting connections")
    before = [s for s in sent if s.written < closed and s.outcome != "refused"]
    assert before and all(s.outcome == "200" for s in before), (
        [s for s in before if s.outcome != "200"],
        closed,
        server.log.read_text()[-3000:],
    )
    # Written after that, a request may still be served (the listener closes just after the
    # log line), be refused a connection, or be lost in a keep-alive connection its client
    # left idle through the whole drain: the race every HTTP/1.1 server has, made rare by
    # the drain (every answer in it says Connection: close), never zero.
    assert 503 in readiness  # readiness failed while the webhook still served
    # The log's time is cut to the millisecond and comes just after the flag is set; a
    # request started after both cannot have been read before the drain began. (`written`
    # can come much later than the server read it: the sending thread may wait for the GIL.)
    draining = logged_at(server.log, "shutting down: /readyz fails") + LOG_RESOLUTION
    served = [s for s in before if s.started > draining]
    assert served, "nothing was served during the drain delay"
    assert all(s.closing for s in served)  # answers during the drain close their connection
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert b'"allowed"' in answer
