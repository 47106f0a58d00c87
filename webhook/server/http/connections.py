"""The listener: bounded time per phase and bounded count per port.

Who can reach the webhook port is not only the apiserver (docs/threat-model.md), so every
client gets bounded time: a TLS handshake and a request head within `header_timeout`, a body
within `body_timeout`, an idle keep-alive connection for `idle_timeout`, unread answers for
`RESPONSE_GRACE`; at most `max_connections` connections, counted from accept, one that is
doing no request's work evicted to make room for a new one. Each connection speaks HTTP/1.1
through protocol.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
import struct
from collections.abc import Callable
from typing import Any

from webhook.server.http.limits import RESPONSE_GRACE, Limits
from webhook.server.http.protocol import Connection, Phase
from webhook.server.http.routes import Routes
from webhook.server.http.state import CUT

log = logging.getLogger("gpu-admission")

# A cut or evicted TLS connection gets this long for the TLS goodbye before it is dropped.
TLS_SHUTDOWN_SECONDS = 5.0
# How long a connection opened just before shutdown gets to send its first request.
FRESH_GRACE_SECONDS = 0.5


_LISTEN_PROBLEMS = {
    errno.EADDRINUSE: "the port is already in use (another server, or an old one still running)",
    errno.EADDRNOTAVAIL: "no interface of this machine has that address",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
}


def _listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=backlog)
    except OSError as exc:
        reason = _LISTEN_PROBLEMS.get(exc.errno or 0, exc.strerror or "refused by the system")
        raise OSError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.setblocking(False)
    return sock


def _refuse(sock: socket.socket) -> None:
    """Close with a reset: the client learns at once, and no TIME_WAIT is kept here."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class Listener:
    """A TCP (and TLS) listener that bounds every connection.

    The event loop's own servers accept and handshake every connection, so they cannot count
    or refuse those that never finish a TLS handshake. Here the listener accepts the sockets
    itself: it counts each from accept, refuses it at the cap before any TLS work, hands it to
    the loop's own TLS (`connect_accepted_socket`, uvloop's when running) with a handshake
    timeout, and a sweep cuts connections that stay too long in any phase.
    """

    def __init__(
        self,
        routes: Routes,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        limits: Limits,
        max_connections: int,
        backlog: int = 128,
    ) -> None:
        self.routes = routes
        self._ssl_context = ssl_context
        self._host = host
        self._port = port
        self._limits = limits
        self._max = max_connections
        self._backlog = backlog
        self._loop: asyncio.AbstractEventLoop | None = None
        self._socket: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[Connection] = set()
        # Evicted to make room, no longer counted, still closing: the sweep drops them if
        # their close never ends.
        self.retired: set[Connection] = set()

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
        self._loop = asyncio.get_running_loop()
        self._socket = _listening_socket(self._host, self._port, self._backlog)
        self._acceptor = self._loop.create_task(self._accept(self._socket))
        self._sweeper = self._loop.create_task(self._sweep())

    async def stop(self, timeout: float) -> None:
        """Stop accepting; connections mid-handshake are dropped, idle ones closed, and those
        with a request under way get `timeout` to be answered (the sweep keeps timing them
        out meanwhile, until `finish`)."""
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
            elif not conn.busy:
                conn.close()  # idle: closed first, so no new request starts on it
        await asyncio.gather(*(c.settled(timeout) for c in list(self.connections)))
        for conn in list(self.connections):
            conn.close()
        deadline = self.now() + TLS_SHUTDOWN_SECONDS  # answers still going out, TLS goodbyes
        while self.connections and self.now() < deadline:
            await asyncio.sleep(0.01)
        for conn in [*self.connections, *self.retired]:
            conn.cut("shutdown")
            self.forget(conn)

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
                c.phase in (Phase.HANDSHAKE, Phase.IDLE)
                and not c.requests
                and now - c.since < FRESH_GRACE_SECONDS
                for c in self.connections
            ):
                return
            await asyncio.sleep(0.01)

    async def finish(self) -> None:
        """After `stop`: stop the sweep."""
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
        if len(self.connections) >= self._max and not self._make_room():
            CUT.labels("connection_cap").inc()
            _refuse(sock)
            return
        conn = Connection(self, self.routes)
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
        self.retired.discard(conn)

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
            lambda c: c.phase is Phase.CLOSING,  # answered and closing already
            lambda c: c.phase is Phase.IDLE and not c.requests,
            lambda c: c.phase is Phase.HANDSHAKE,
            lambda c: c.phase is Phase.HEAD,
            lambda c: c.phase is Phase.WRITING,  # a client not reading its answers
            # a body still arriving after `stalled_body`: the apiserver sends one in one go
            lambda c: c.phase is Phase.REQUEST and c.receiving and now - c.since > stalled,
            lambda c: c.phase is Phase.IDLE,
        ]
        for wanted in order:
            candidates = [c for c in self.connections if wanted(c)]
            if candidates:
                oldest = min(candidates, key=lambda c: c.since)
                self.forget(oldest)
                oldest.evict()
                if oldest.transport is not None:  # a polite close: may still be finishing
                    self.retired.add(oldest)
                return True
        return False

    async def _sweep(self) -> None:
        limits = self._limits
        tick = min(1.0, limits.header_timeout / 4, limits.body_timeout / 4, limits.idle_timeout / 4)
        while True:
            await asyncio.sleep(tick)
            now = self.now()
            closing_grace = limits.linger + TLS_SHUTDOWN_SECONDS
            for conn in list(self.retired):
                if now - conn.since > closing_grace:
                    conn.abort()
                    self.retired.discard(conn)
            for conn in list(self.connections):
                waited = now - conn.since
                phase = conn.phase
                if phase is Phase.CLOSING and waited > closing_grace:
                    conn.abort()  # a close that never ends: its client reads nothing
                elif phase is Phase.HEAD and waited > limits.header_timeout:
                    conn.cut("header_timeout")
                elif phase is Phase.IDLE and waited > limits.idle_timeout:
                    conn.close()  # the keep-alive timeout: a clean close
                elif phase is Phase.WRITING and waited > RESPONSE_GRACE:
                    conn.cut("request_timeout")
                elif phase is Phase.REQUEST and conn.receiving and waited > limits.body_timeout:
                    conn.body_overdue()  # answered 408
                elif phase is Phase.REQUEST and waited > limits.request_timeout:
                    conn.cut("request_timeout")
