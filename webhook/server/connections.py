"""The connection layer: bounded time per phase and bounded count per port.

Who can reach the webhook port is not only the apiserver (README, "Threat model"), so every
client gets bounded time: a TLS handshake and a request head within `header_timeout`, a body
within `body_timeout`, an idle keep-alive connection for `idle_timeout`; at most
`max_connections` connections, counted from accept, one that is doing no request's work
evicted to make room for a new one. `Listener` and `Connection` sit under aiohttp's own
request handling and change nothing above it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import logging
import socket
import ssl
import struct
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse
from aiohttp.web_server import Server
from prometheus_client import Counter

from webhook.server.limits import Limits

log = logging.getLogger("gpu-admission")

# A cut or evicted TLS connection gets this long for the TLS goodbye before it is dropped.
TLS_SHUTDOWN_SECONDS = 5.0
# Request heads: the apiserver sends a short request line and a dozen small headers.
# At most 32 x 4 KiB = 128 KiB of head per connection (aiohttp allows 128 x 8 KiB).
HEAD_LIMITS = {"max_line_size": 4096, "max_field_size": 4096, "max_headers": 32}
# How long a connection opened just before shutdown gets to send its first request.
FRESH_GRACE_SECONDS = 0.5

CUT = Counter(
    "gpu_admission_clients_cut_total",
    "Connections or requests cut to keep each client's work bounded, by reason "
    "(connection_cap, evicted_idle, evicted_handshake, evicted_head, header_timeout, "
    "request_timeout, body_timeout, body_too_large, body_budget).",
    ["reason"],
)


class BodyTimeout(Exception):
    """Set on a body stream by the listener's sweep when the body is overdue."""


class _Phase(enum.Enum):
    HANDSHAKE = "handshake"  # TLS not done yet: bounded by the handshake timeout
    IDLE = "idle"  # between requests: aiohttp's keep-alive timeout; evictable at the cap
    HEAD = "head"  # part of a request head received: header timeout
    REQUEST = "request"  # head complete, body and answer: request timeout
    CLOSING = "closing"  # cut; waiting for the transport to go


class Connection(RequestHandler):
    """aiohttp's per-connection protocol, plus the phase it is in and since when, which the
    listener's sweep reads to cut clients that are too slow."""

    def __init__(self, listener: Listener, manager: Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.listener = listener
        self.phase = _Phase.HANDSHAKE
        self.since = listener.now()
        self.handshake: asyncio.Task[None] | None = None
        self.requests = 0  # request heads received on this connection
        self.body: StreamReader | None = None  # a request body being read, for the sweep
        self.close_after_response = False  # a handler gave up on the client, or shutdown
        self._settled: asyncio.Event | None = None  # set when a request under way is done

    def enter(self, phase: _Phase) -> None:
        if self.phase is not _Phase.CLOSING:
            self.phase = phase
            self.since = self.listener.now()
        if self._settled is not None and self.phase in (_Phase.IDLE, _Phase.CLOSING):
            self._settled.set()

    @property
    def busy(self) -> bool:
        """A request is under way: part of its head, or its head and maybe part of its body."""
        return self.phase in (_Phase.HEAD, _Phase.REQUEST)

    def close(self) -> None:
        """At shutdown: close an idle connection now, a busy one after its answer.

        aiohttp's close() also drops every byte that arrives afterwards, even the rest of a
        request already under way, which would cut that request: the drain must not.
        """
        if self.busy:
            self.close_after_response = True
        else:
            super().close()

    async def shutdown(self, timeout: float | None = 15.0) -> None:
        """Let a request under way arrive in full and be answered, then close (aiohttp's
        shutdown stops reading at once, which cuts a body still arriving)."""
        started = self.listener.now()
        if self.busy:
            self.close_after_response = True
            self._settled = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), timeout)
        if timeout is not None:
            timeout = max(0.0, timeout - (self.listener.now() - started))
        await super().shutdown(timeout)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.enter(_Phase.IDLE)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.listener.forget(self)
        if self._settled is not None:
            self._settled.set()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.phase is _Phase.IDLE:
            self.enter(_Phase.HEAD)
        super().data_received(data)

    async def finish_response(
        self, request: BaseRequest, resp: StreamResponse, start_time: float | None
    ) -> tuple[StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self.enter(_Phase.IDLE)
            if self.close_after_response:  # no lingering over a body that is not coming
                self.force_close()

    def cut(self, reason: str) -> None:
        """Drop a client that broke a limit: no goodbye, its memory is freed at once."""
        CUT.labels(reason).inc()
        self.phase = _Phase.CLOSING
        if self.transport is not None:
            self.transport.abort()
        self.force_close()

    def evict(self) -> None:
        """Make room at the cap: an idle keep-alive connection is closed politely (its client
        sees a clean close), one still in its handshake or head is dropped."""
        CUT.labels(f"evicted_{self.phase.value}").inc()
        phase, self.phase = self.phase, _Phase.CLOSING
        if self.body is not None:  # a stalled body: its handler stops waiting for the rest
            self.body.set_exception(BodyTimeout())
            self.body = None
        if self.handshake is not None:
            self.handshake.cancel()
        elif phase is _Phase.IDLE:
            self.force_close()
        else:
            if self.transport is not None:
                self.transport.abort()
            self.force_close()


def _mark_heads(server: Server) -> None:
    """Tell each connection when a request head is complete: aiohttp builds the request
    object then, through the server's public `request_factory`."""
    inner = server.request_factory

    def factory(
        message: Any, payload: Any, protocol: RequestHandler, writer: Any, task: Any
    ) -> BaseRequest:
        if isinstance(protocol, Connection):
            protocol.enter(_Phase.REQUEST)
            protocol.requests += 1
        return inner(message, payload, protocol, writer, task)

    server.request_factory = factory


def _listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=backlog)
    sock.setblocking(False)
    return sock


def _refuse(sock: socket.socket) -> None:
    """Close with a reset: the client learns at once, and no TIME_WAIT is kept here."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class Listener(web.BaseSite):
    """A TCP (and TLS) listener for an aiohttp runner that bounds every connection.

    aiohttp's TCPSite lets the event loop accept and handshake every connection, so it cannot
    count or refuse those that never finish a TLS handshake. Here the listener accepts the
    sockets itself: it counts each from accept, refuses it at the cap before any TLS work,
    hands it to the loop's own TLS (`connect_accepted_socket`, uvloop's when running) with a
    handshake timeout, and a sweep cuts connections that stay too long in a request head or
    in a request.
    """

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        limits: Limits,
        max_connections: int,
        handler_kwargs: dict[str, Any],
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host = host
        self._port = port
        self._limits = limits
        self._max = max_connections
        self._kwargs = handler_kwargs
        self._loop: asyncio.AbstractEventLoop | None = None
        self._socket: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[Connection] = set()

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self.port}"

    @property
    def port(self) -> int:
        """The bound port (the real one when asked for port 0)."""
        return int(self._socket.getsockname()[1]) if self._socket is not None else self._port

    def now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    async def start(self) -> None:
        await super().start()
        self._loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        _mark_heads(server)
        self._socket = _listening_socket(self._host, self._port, self._backlog)
        self._acceptor = self._loop.create_task(self._accept(self._socket))
        self._sweeper = self._loop.create_task(self._sweep())

    async def stop(self) -> None:
        """Stop accepting; connections mid-handshake are dropped, the others are the runner's
        to drain (the sweep keeps timing them out meanwhile, until `finish`)."""
        if self._acceptor is not None:
            self._acceptor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._acceptor
            self._acceptor = None
        if self._socket is not None:
            self._adopt_backlog(self._socket)  # closing the socket would reset these
            self._socket.close()
        await self._let_fresh_connections_speak()
        for conn in list(self.connections):
            if conn.handshake is not None:
                conn.handshake.cancel()
        await super().stop()

    def _adopt_backlog(self, listening: socket.socket) -> None:
        """Take the connections the kernel completed but nobody accepted yet: their clients
        already count them as open and may have written a request."""
        listening.setblocking(False)
        while True:
            try:
                sock, _ = listening.accept()
            except OSError:  # BlockingIOError: the backlog is empty
                return
            self._admit(sock)

    async def _let_fresh_connections_speak(self) -> None:
        """A client that connected just before the listener closed has its request on the way:
        cancelling its handshake or closing it as idle would cut it. Wait (briefly) until every
        connection that has sent nothing yet either starts a request or is older than the
        grace."""
        deadline = self.now() + FRESH_GRACE_SECONDS
        while self.now() < deadline:
            now = self.now()
            if not any(
                c.phase in (_Phase.HANDSHAKE, _Phase.IDLE)
                and not c.requests
                and now - c.since < FRESH_GRACE_SECONDS
                for c in self.connections
            ):
                return
            await asyncio.sleep(0.01)

    async def finish(self) -> None:
        """After the runner's cleanup: stop the sweep."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listening)
            except OSError as exc:  # out of file descriptors, mostly: let some close first
                log.warning("accepting a connection failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            self._admit(sock)

    def _admit(self, sock: socket.socket) -> None:
        """Count a new connection against the cap, then start its handshake."""
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        if len(self.connections) >= self._max and not self._make_room():
            CUT.labels("connection_cap").inc()
            _refuse(sock)
            return
        conn = Connection(self, server, loop=loop, **self._kwargs)
        self.connections.add(conn)
        conn.handshake = loop.create_task(self._open(sock, conn))

    async def _open(self, sock: socket.socket, conn: Connection) -> None:
        """Hand the socket to the loop's transport (and TLS); it calls `connection_made`."""
        loop = asyncio.get_running_loop()
        tls: dict[str, Any] = {}
        if self._ssl_context is not None:
            tls = {
                "ssl": self._ssl_context,
                "ssl_handshake_timeout": self._limits.header_timeout,
                "ssl_shutdown_timeout": TLS_SHUTDOWN_SECONDS,
            }
        try:
            await loop.connect_accepted_socket(lambda: conn, sock, **tls)
        except BaseException as exc:  # timeout, bad client, no client certificate, cancelled
            self.forget(conn)
            _refuse(sock)
            if isinstance(exc, asyncio.CancelledError):
                raise
            log.debug("connection not opened: %r", exc)
        finally:
            conn.handshake = None

    def forget(self, conn: Connection) -> None:
        self.connections.discard(conn)

    def _make_room(self) -> bool:
        """At the cap, close one connection that is not doing a request's work, cheapest loss
        first: the longest-idle one that never sent a request, else the oldest still in its
        TLS handshake, else the oldest still sending a request head, else the longest-idle
        one whose body has been arriving for longer than `stalled_body`, else the longest-idle
        one that did send requests (the apiserver's pooled connections). A real client needs
        milliseconds for a handshake, a head or a body, so an attacker holding slots that way
        must outpace every new connection; only when all are doing a request's work is the
        new one refused."""
        now, stalled = self.now(), self._limits.stalled_body
        order: list[Callable[[Connection], bool]] = [
            lambda c: c.phase is _Phase.IDLE and not c.requests,
            lambda c: c.phase is _Phase.HANDSHAKE,
            lambda c: c.phase is _Phase.HEAD,
            # a body still arriving after `stalled_body`: the apiserver sends one in one go
            lambda c: c.phase is _Phase.REQUEST and c.body is not None and now - c.since > stalled,
            lambda c: c.phase is _Phase.IDLE,
        ]
        for wanted in order:
            candidates = [c for c in self.connections if wanted(c)]
            if candidates:
                oldest = min(candidates, key=lambda c: c.since)
                self.forget(oldest)
                oldest.evict()
                return True
        return False

    async def _sweep(self) -> None:
        limits = self._limits
        tick = min(1.0, limits.header_timeout / 4, limits.body_timeout / 4)
        while True:
            await asyncio.sleep(tick)
            now = self.now()
            for conn in list(self.connections):
                waited = now - conn.since
                if conn.phase is _Phase.HEAD and waited > limits.header_timeout:
                    conn.cut("header_timeout")
                elif conn.phase is not _Phase.REQUEST:
                    continue
                elif conn.body is not None and waited > limits.body_timeout:
                    conn.body.set_exception(BodyTimeout())  # its handler answers 408
                    conn.body = None
                elif waited > limits.request_timeout:
                    conn.cut("request_timeout")


def handler_kwargs(limits: Limits) -> dict[str, Any]:
    """RequestHandler settings: aiohttp's own keep-alive timeout is the idle timeout."""
    accepted = inspect.signature(RequestHandler.__init__).parameters
    kwargs: dict[str, Any] = {
        "keepalive_timeout": limits.idle_timeout,
        "lingering_time": limits.linger,
        "access_log": None,
    }
    kwargs.update({k: v for k, v in HEAD_LIMITS.items() if k in accepted})
    return kwargs
