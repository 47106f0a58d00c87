"""The real server in a subprocess, and a client that talks to it as the apiserver.

The apiserver keeps connections alive, appends `?timeout=10s`, sends a fresh uid each time and
checks it comes back; `Webhook.review` does the same and fails the test if the uid is not echoed.
`serving` runs the same routes in-process on a plain-HTTP listener.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from tests.support.paths import ROOT
from tests.support.reviews import Answer, review_for


@dataclass
class Webhook:
    """A running server and a keep-alive HTTPS client bound to it."""

    url: str
    client: httpx.Client
    process: subprocess.Popen[bytes]

    def post(self, endpoint: str, body: bytes, **headers: str) -> httpx.Response:
        return self.client.post(
            f"{self.url}/{endpoint}",
            params={"timeout": "10s"},
            content=body,
            headers={"Content-Type": "application/json", **headers},
        )

    def review(self, endpoint: str, review: dict[str, Any]) -> Answer:
        resp = self.post(endpoint, json.dumps(review, separators=(",", ":")).encode())
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["apiVersion"] == "admission.k8s.io/v1"
        assert body["kind"] == "AdmissionReview"
        assert body["response"]["uid"] == review["request"]["uid"]
        return Answer(body["response"])

    def mutate(self, obj: Any, **kw: Any) -> Answer:
        return self.review("mutate", review_for(obj, **kw))

    def validate(self, obj: Any, **kw: Any) -> Answer:
        return self.review("validate", review_for(obj, **kw))

    def admit(self, obj: Any, **kw: Any) -> tuple[Any, Answer, Answer]:
        """What the apiserver does: mutate, apply the patch, validate the mutated object."""
        mutated_answer = self.mutate(obj, **kw)
        assert mutated_answer.allowed, mutated_answer.message
        mutated = mutated_answer.apply(obj)
        return mutated, mutated_answer, self.validate(mutated, **kw)

    def alive(self) -> bool:
        return self.process.poll() is None and self.client.get(f"{self.url}/healthz").is_success


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_webhook(
    certs: Path,
    rules: Path,
    log: Path,
    *extra: str,
    wait_ready: bool = True,
    client_cert: tuple[Path, Path] | None = None,
    ready_timeout: float = 20.0,
    probe_port: int | None = None,
) -> Webhook:
    """The server in a subprocess, its probes on the TLS port (or on `probe_port`, plain
    HTTP, as deployed), once it answers them."""
    port = free_port()
    with log.open("wb") as fh:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "webhook",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--cert",
                str(certs / "tls.crt"),
                "--key",
                str(certs / "tls.key"),
                "--rules",
                str(rules),
                # Probes on the TLS port (one port per test server); a test may pass its own.
                "--probe-port",
                str(probe_port or 0),
                # No endpoint to be removed from here: stop at once (tests of the drain set it).
                "--drain-seconds",
                "0",
                *extra,
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    ctx = ssl.create_default_context(cafile=certs / "ca.crt")
    if client_cert is not None:  # as an apiserver configured with a client certificate
        ctx.load_cert_chain(*client_cert)
    client = httpx.Client(verify=ctx, timeout=10.0)
    url = f"https://127.0.0.1:{port}"
    probes = url if probe_port is None else f"http://127.0.0.1:{probe_port}"
    deadline = time.monotonic() + ready_timeout
    while True:
        if process.poll() is not None:
            client.close()
            raise RuntimeError(f"webhook exited early:\n{log.read_text()}")
        try:
            if client.get(f"{probes}/{'readyz' if wait_ready else 'healthz'}").is_success:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            process.wait()  # reaped here, not left running for the collector to warn of
            client.close()
            raise RuntimeError(f"webhook did not come up:\n{log.read_text()}")
        time.sleep(0.05)
    return Webhook(url=url, client=client, process=process)


def stop_webhook(hook: Webhook) -> None:
    hook.client.close()
    hook.process.terminate()
    try:
        hook.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        hook.process.kill()
        hook.process.wait()  # reaped: a Popen left running is a ResourceWarning


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[aiohttp.ClientSession]:
    """The routes of `webhook.server.app.make_app` on a real plain-HTTP listener on 127.0.0.1
    (what `serve` runs, minus TLS), and a keep-alive client for it: in-process tests of the
    handlers and what runs beside them."""
    from webhook.server.http.ports import start_servers

    servers = await start_servers(app, host="127.0.0.1", port=0, ssl_context=None)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{servers.port}") as client:
            yield client
    finally:
        await servers.stop()
