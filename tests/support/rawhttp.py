"""A raw HTTP/1.1 client over real sockets, TLS or plain, for the listener tests: a test writes
the exact bytes it wants (a stalled head, a pipelined pair, a body for no route) and reads the
answer as the bytes came back, on asyncio streams or, for what a stream cannot do (half-close
under TLS, any ALPN offer), on a blocking `TlsClient`. The listeners are started in-process as
`serve` starts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
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


class TlsClient:
    """One blocking TLS connection: a plain socket and a TLS object over memory buffers, so a
    test writes the exact bytes it wants, can half-close the TCP connection (no TLS goodbye)
    and offer any ALPN; responses are parsed as read. Run it in a thread beside the server's
    event loop."""

    def __init__(self, port: int, ca: Path, alpn: list[str] | None = None) -> None:
        ctx = ssl.create_default_context(cafile=str(ca))
        if alpn is not None:
            ctx.set_alpn_protocols(alpn)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self._in, self._out, server_hostname="127.0.0.1")
        self.buffer = b""
        self.eof = False
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                self._receive()
        self._flush()

    def _flush(self) -> None:
        data = self._out.read()
        if data:
            self.sock.sendall(data)

    def _receive(self) -> None:
        data = self.sock.recv(65536)
        if data:
            self._in.write(data)
        else:
            self._in.write_eof()

    def send(self, data: bytes) -> None:
        self.tls.write(data)
        self._flush()

    def half_close(self) -> None:
        """No more bytes from this side (a TCP FIN, no TLS goodbye): the answer may still come."""
        self.sock.shutdown(socket.SHUT_WR)

    def _read_more(self) -> bool:
        """Decrypt what the server sent next; False at the end of the connection."""
        if self.eof:
            return False
        while True:
            try:
                data = self.tls.read(65536)
            except ssl.SSLWantReadError:
                try:
                    self._receive()
                except ConnectionResetError:
                    self.eof = True
                    return False
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError, ssl.SSLError):
                self.eof = True
                return False
            if not data:
                self.eof = True
                return False
            self.buffer += data
            return True

    def response(self) -> tuple[int, dict[str, str], bytes]:
        """The next whole response: status, headers (lower-case names) and body."""
        while b"\r\n\r\n" not in self.buffer:
            assert self._read_more(), f"closed before a response: {self.buffer!r}"
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        assert status_line.startswith("HTTP/1.1 "), status_line
        fields = {}
        for line in lines:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        length = int(fields.get("content-length", "0"))
        while len(self.buffer) < length:
            assert self._read_more(), "closed inside a response body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split()[1]), fields, body

    def closed(self) -> bool:
        """Whether the server ends the connection (nothing more to read) within PATIENCE."""
        try:
            while self._read_more():
                pass
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()
