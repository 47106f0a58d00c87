"""A raw HTTP/1.1 client over real sockets, TLS or plain, for the listener tests: a test writes
the exact bytes it wants (a stalled head, a pipelined pair, a body for no route) and reads the
answer as the bytes came back. The listeners are started in-process as `serve` starts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.support.reviews import review_for
from webhook.server.app import make_app, make_probe_app
from webhook.server.http.limits import Limits
from webhook.server.http.ports import Servers, start_servers
from webhook.server.http.state import ServerState
from webhook.server.http.tls import make_ssl_context
from webhook.server.reload import RuleHolder

FAST = Limits(header_timeout=0.3, body_timeout=0.3, idle_timeout=0.3, max_connections=8, linger=0.1)
# How long a client waits for something the server must do; far above every limit above.
PATIENCE = 5.0

GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train", "namespace": "ml-team"},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
                "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "8Gi"}},
            }
        ]
    },
}


@contextlib.asynccontextmanager
async def running_tls(
    certs: Path, holder: RuleHolder, limits: Limits = FAST, *, client_ca: Path | None = None
) -> AsyncIterator[Servers]:
    """The webhook port (TLS) and the probe port, as `serve` starts them."""
    state = ServerState(limits)
    servers = await start_servers(
        make_app(holder, state=state, probes=False),
        host="127.0.0.1",
        port=0,
        ssl_context=make_ssl_context(certs / "tls.crt", certs / "tls.key", client_ca),
        probe_app=make_probe_app(holder, state=state),
        probe_port=0,
    )
    try:
        yield servers
    finally:
        await servers.stop()


def client_context(certs: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs / "ca.crt"))


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(port: int, ctx: ssl.SSLContext | None = None) -> Stream:
    return await asyncio.open_connection("127.0.0.1", port, ssl=ctx)


def head(path: str = "/validate", length: int | None = None, **headers: str) -> bytes:
    lines = [f"POST {path}?timeout=10s HTTP/1.1", "Host: gpu-admission", *headers_of(headers)]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def headers_of(headers: dict[str, str]) -> list[str]:
    return [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length (aiohttp always sends one here)."""
    status_line = await asyncio.wait_for(reader.readline(), PATIENCE)
    assert status_line, "connection closed before a response"
    fields: dict[str, str] = {}
    while (line := await asyncio.wait_for(reader.readline(), PATIENCE)) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        fields[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(reader.readexactly(int(fields["content-length"])), PATIENCE)
    return int(status_line.split()[1]), fields, body


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """True when the server closes or resets the connection within PATIENCE."""
    try:
        return await asyncio.wait_for(reader.read(65536), PATIENCE) == b""
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


async def review(stream: Stream, obj: Any = GPU_POD) -> tuple[int, dict[str, str], bytes]:
    reader, writer = stream
    body = json.dumps(review_for(obj)).encode()
    writer.write(head(length=len(body), Content_Type="application/json") + body)
    await writer.drain()
    return await read_response(reader)


async def refused(port: int, ctx: ssl.SSLContext) -> bool:
    """Whether a review on a new connection fails for want of a connection. Under TLS 1.3 the
    client learns it on first use: a reset, an alert or a bare close instead of an answer."""
    try:
        stream = await connect(port, ctx)
        await review(stream)
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        return True
    except AssertionError as exc:  # read_response: closed before a response
        return "closed before a response" in str(exc)
    await close(stream)
    return False


async def close(stream: Stream) -> None:
    stream[1].close()
    with contextlib.suppress(ConnectionError, ssl.SSLError, TimeoutError):
        await asyncio.wait_for(stream[1].wait_closed(), 1.0)


@contextlib.asynccontextmanager
async def running_plain(holder: RuleHolder, limits: Limits | None = None) -> AsyncIterator[Servers]:
    """The webhook port in plain HTTP (limits far above what a test takes unless given)."""
    state = ServerState(limits or Limits(idle_timeout=PATIENCE * 2))
    servers = await start_servers(
        make_app(holder, state=state), host="127.0.0.1", port=0, ssl_context=None
    )
    try:
        yield servers
    finally:
        await servers.stop()


def post(body: bytes, path: str = "/validate", version: str = "1.1", **headers: str) -> bytes:
    lines = [f"POST {path}?timeout=10s HTTP/{version}", "Host: gpu-admission"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    if "Transfer_Encoding" not in headers:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def review_body(name: str = "train") -> tuple[bytes, str]:
    pod = json.loads(json.dumps(GPU_POD))
    pod["metadata"]["name"] = name
    review = review_for(pod)
    return json.dumps(review).encode(), review["request"]["uid"]
