"""HTTP/1.1 for the webhook's few routes: httptools parses, handlers answer at once, answers
go out as prepared bytes.

Why not aiohttp's server: a review is answered synchronously (decode, decide, encode), so a
request object, a task per request, a stream reader and a response object cost more than
deciding a plain pod (docs/http-server.md measures both fronts). This protocol keeps what
the apiserver, the kubelet and Prometheus use: keep-alive, Content-Length and chunked bodies,
`Expect: 100-continue`, pipelined requests answered in order. Nothing else: no upgrades, no
transfer codings but chunked (501), no compression. Every limit of the aiohttp-based layer it
replaced holds here too: head size, body size and budget, and the phases the listener's sweep
times (connections.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from typing import Any, Protocol

import httptools
import orjson

from webhook.server.http import offload
from webhook.server.http.body import Lease, Refused
from webhook.server.http.offload import Queued
from webhook.server.http.routes import Answer, Handler, Later, Request, Routes, encode_answer, error
from webhook.server.http.state import CUT

__all__ = ["Connection", "Owner", "Phase"]

log = logging.getLogger("gpu-admission")

# Request heads: the apiserver sends a short request line and a dozen small headers.
MAX_URL = 4096
MAX_FIELD = 4096  # one header, name and value
MAX_HEADERS = 32
MAX_HEAD = MAX_URL + MAX_HEADERS * MAX_FIELD  # 132 KiB of head at most per connection


class Phase(enum.Enum):
    HANDSHAKE = "handshake"  # TLS not done yet: bounded by the handshake timeout
    IDLE = "idle"  # between requests: the idle timeout; evictable at the cap
    HEAD = "head"  # part of a request head received: header timeout
    REQUEST = "request"  # head complete, body arriving: body timeout
    WRITING = "writing"  # answers not read by the client: the response grace
    CLOSING = "closing"  # cut or closing; waiting for the transport to go


_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Owner(Protocol):
    """What a connection needs of the listener that accepted it (connections.Listener): the
    clock its sweep reads, and to be let go when it closes."""

    def now(self) -> float: ...

    def forget(self, conn: Connection) -> None: ...


def _codings(value: bytes) -> list[bytes]:
    """The transfer codings of a Transfer-Encoding value, in order, lower-cased."""
    return [c.strip().lower() for c in value.split(b",") if c.strip()]


class _Stop(Exception):
    """Raised inside a parser callback: nothing more on this connection is parsed."""


class Connection(asyncio.Protocol):
    """One client connection: the request being parsed, and the phase it is in and since
    when, which the listener's sweep reads to cut clients that are too slow."""

    def __init__(self, listener: Owner, routes: Routes) -> None:
        self.listener = listener
        self.routes = routes
        self.state = routes.state
        self.phase = Phase.HANDSHAKE
        self.since = listener.now()
        self.handshake: asyncio.Task[None] | None = None
        self.requests = 0  # request heads received on this connection
        self.receiving = False  # a body is arriving: the body timeout applies
        self.close_after_response = False  # shutdown: close once the request under way is done
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._lease = Lease(self.state)
        limits = self.state.limits
        self._max_body = routes.max_body if routes.max_body is not None else limits.max_body
        # Bytes on the wire a request may take: its body, chunk framing (1.5% at 16 KiB
        # chunks; a client sending tiny chunks is refused) and trailers.
        self._max_wire = self._max_body + MAX_HEAD + self._max_body // 64 + 4096
        self._url = b""
        self._route: Handler | Answer | None = None
        self._wire = 0  # bytes of the current request read so far (head, body, framing)
        self._began = False  # a request began in the read being parsed
        self._headers = 0
        self._continue = False
        self._body_coming = False
        self._codings = b""  # the Transfer-Encoding field values, joined
        self._first = b""  # the body: its first piece, then one growing buffer
        self._buffer: bytearray | None = None
        self._total = 0
        self._ignoring = False  # refused: what still arrives is dropped until the close
        self._linger: asyncio.TimerHandle | None = None
        self._write_paused = False
        self._settled: asyncio.Event | None = None  # set when a request under way is done
        # An answer being worked out off the loop (offload.py), and the requests pipelined
        # behind it, answered in order once it is written. Reading pauses meanwhile.
        self._later: Later | None = None
        self._waiting: list[Queued] = []
        self._mid_message = False  # the parser is inside a request (head or body)

    # --- phases ----------------------------------------------------------------------------

    def enter(self, phase: Phase) -> None:
        if self.phase is not Phase.CLOSING:
            self.phase = phase
            self.since = self.listener.now()
        if self._settled is not None and self.phase in (Phase.IDLE, Phase.CLOSING):
            self._settled.set()

    @property
    def lingering(self) -> bool:
        """Refused, answered, and dropping what still arrives until the close."""
        return self._linger is not None

    @property
    def busy(self) -> bool:
        """A request is under way: part of its head, or its head and part of its body."""
        return self.phase in (Phase.HEAD, Phase.REQUEST)

    # --- transport events ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is duck-typed
        self.enter(Phase.IDLE)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.listener.forget(self)
        self.phase = Phase.CLOSING
        self.receiving = False
        self._lease.release()
        if self._later is not None:
            self._later.cancel()  # one still waiting for the worker is never decided
            self._later = None
        for queued in self._waiting:
            queued.lease.release()
        self._waiting.clear()
        self._first, self._buffer = b"", None
        if self._linger is not None:
            self._linger.cancel()
        if self._settled is not None:
            self._settled.set()
        self.transport = None

    def pause_writing(self) -> None:
        """The client is not reading its answers: read no more requests until it does."""
        self._write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()
        if self.phase is Phase.IDLE:
            self.enter(Phase.WRITING)

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.phase is Phase.WRITING:
            self.enter(Phase.IDLE)
        if self.transport is not None and not self._ignoring and self._later is None:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._ignoring or self.phase is Phase.CLOSING:
            return
        if self.phase is Phase.IDLE:
            self.enter(Phase.HEAD)
        self._began = False
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # ours, raised in a callback
            if not isinstance(exc.__context__, _Stop):
                log.error("request handling failed", exc_info=exc.__context__)
                self.cut("internal_error")
            return
        except httptools.HttpParserUpgrade:
            self._refuse(400, "protocol upgrades are not supported", "bad_request", linger=False)
            return
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed request: {_reason(exc)}", "bad_request", linger=False)
            return
        # A request that began in this read: a head still incomplete is charged the whole read
        # (the head bound must hold; only a client pipelining large bodies could be charged
        # too much), a body is counted from the next read (its own bounds hold meanwhile).
        if not self._began:
            self._wire += len(data)
        else:
            self._wire = len(data) if self.phase is Phase.HEAD else 0
        if self.phase is Phase.HEAD and self._wire > MAX_HEAD:
            self._refuse(431, "request head too large", "head_too_large", linger=False)
        elif self.phase is Phase.REQUEST and self._wire > self._max_wire:
            self._refuse(413, f"request over {self._max_wire} bytes", "body_too_large")

    # --- parser callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._write_paused:
            # Pipelined requests while the answers already written go unread: answering
            # them would only pile up more. The apiserver never pipelines.
            self.cut("unread_answers")
            raise _Stop
        if self.phase is Phase.IDLE:  # a pipelined request after an answer
            self.enter(Phase.HEAD)
        self._began = True
        self._mid_message = True
        self._url = b""
        self._route = None
        self._headers = 0
        self._continue = False
        self._body_coming = False
        self._codings = b""
        self._first, self._buffer = b"", None
        self._total = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_URL:
            self._refuse(414, "request URL too long", "head_too_large", linger=False)
            raise _Stop

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers += 1
        if self._headers > MAX_HEADERS or len(name) + len(value) > MAX_FIELD:
            self._refuse(431, "request head too large", "head_too_large", linger=False)
            raise _Stop
        lowered = name.lower()
        if lowered == b"content-length":
            self._declared(value)
        elif lowered == b"transfer-encoding":
            self._body_coming = True
            self._codings += b"," + value if self._codings else value
        elif lowered == b"expect" and value.lower() == b"100-continue":
            self._continue = True

    def _lookup(self) -> Handler | Answer:
        """The route, known from the request line alone (headers come after it)."""
        if self._route is None:
            path, _, _ = self._url.partition(b"?")
            method = self._parser.get_method().decode("latin-1")
            self._route = self.routes.find(method, path.decode("latin-1"))
        return self._route

    def _declared(self, value: bytes) -> None:
        """A Content-Length over the limit is refused before a byte of the body is read; a
        body for no route here draws nothing from the budget (it is never read)."""
        try:
            length = int(value)
        except ValueError:
            return  # the parser itself rejects it
        self._body_coming = length > 0
        if isinstance(self._lookup(), Answer):
            return
        if length > self._max_body:
            self._refuse(413, self._too_large, "body_too_large")
            raise _Stop
        try:
            self._lease.cover(length)
        except Refused as exc:
            self._refuse_with(exc)
            raise _Stop from None

    @property
    def _too_large(self) -> str:
        return f"request body over {self._max_body} bytes"

    def on_headers_complete(self) -> None:
        self.enter(Phase.REQUEST)
        self.requests += 1
        self.receiving = True
        codings = _codings(self._codings) if self._codings else None
        if codings is not None and codings != [b"chunked"]:
            # Where chunked is not last the body's end cannot be known (400); where it is, the
            # body is framed but holds gzip or the like, which is not decoded here (501).
            # Either way the connection closes: what follows it cannot be told apart.
            if codings[-1] == b"chunked":
                self._refuse(
                    501, "transfer codings other than chunked are not supported", "bad_request"
                )
            else:
                self._refuse(
                    400,
                    "malformed request: chunked must be the last transfer coding",
                    "bad_request",
                )
            raise _Stop
        route = self._lookup()
        if isinstance(route, Answer) and self._body_coming:
            # No route takes it: answered now, and its body is never read.
            self._refuse(route.status, _reason_of(route), "no_route")
            raise _Stop
        if self._continue and self.transport is not None:
            self.transport.write(_CONTINUE)

    def on_body(self, chunk: bytes) -> None:
        self._total += len(chunk)
        if self._total > self._max_body:  # chunked: cut at the limit
            self._refuse(413, self._too_large, "body_too_large")
            raise _Stop
        try:
            self._lease.cover(self._total)
        except Refused as exc:
            self._refuse_with(exc)
            raise _Stop from None
        # The usual one-piece body is kept as it came; more pieces grow one buffer, so tiny
        # chunks cost their bytes, not an object each.
        if self._buffer is not None:
            self._buffer += chunk
        elif not self._first:
            self._first = chunk
        else:
            self._buffer = bytearray(self._first)
            self._buffer += chunk
            self._first = b""

    def on_message_complete(self) -> None:
        self.receiving = False
        self._mid_message = False
        # A bytearray is read by the decoder in place.
        body = self._first if self._buffer is None else self._buffer
        self._first, self._buffer = b"", None
        path, _, _ = self._url.partition(b"?")
        request = Request(self._parser.get_method().decode("latin-1"), path.decode("latin-1"), body)
        del body
        queued = Queued(request, self._lease, self._parser.should_keep_alive())
        if self._later is not None:
            # Pipelined behind an answer worked out off the loop: answered after it, in order,
            # its body still drawing on the budget meanwhile.
            self._waiting.append(queued)
            self._lease = Lease(self.state)
            return
        if not self._handle(queued):
            raise _Stop

    def _handle(self, queued: Queued) -> bool:
        """Answer a request now, or start working its answer out off the loop; False once
        the connection is closing."""
        answer = self.routes.answer(queued.request)  # never raises: a 500 instead
        if isinstance(answer, Later):
            self._defer(answer, queued)
            return True
        queued.lease.release()
        return self._respond(answer, queued)

    def _respond(self, answer: Answer, queued: Queued) -> bool:
        """Write the answer; False when the connection closes after it."""
        close = (
            answer.close
            or self.close_after_response
            or self.state.draining
            or not queued.keep_alive
        )
        if not self._mid_message:  # not while a request pipelined after it is being read
            self.enter(Phase.IDLE)
        self._write(encode_answer(answer, close, head_only=queued.head_only), close)
        if close:
            return False
        if self._write_paused and self.phase is Phase.IDLE:  # answers pile up unread
            self.enter(Phase.WRITING)
        return True

    def _defer(self, later: Later, queued: Queued) -> None:
        """Decide on the worker thread; nothing more is read until the answer is written
        (what was already read is parsed, and queued behind it)."""
        if queued.lease is self._lease:
            self._lease = Lease(self.state)  # the request keeps its share until answered
        if self.transport is not None:
            self.transport.pause_reading()
        self._later = later
        offload.start(later).add_done_callback(lambda done: self._decided(done, later, queued))

    def _decided(self, done: asyncio.Future[Any], later: Later, queued: Queued) -> None:
        """On the loop, once the worker is done: finish and write the answer, then answer
        what was pipelined behind it, then read on."""
        if self._later is later:
            self._later = None
        queued.lease.release()
        if done.cancelled() or self.transport is None or self.phase is Phase.CLOSING:
            return  # cut or closed meanwhile
        try:
            answer = later.finish(done.result())
        except Exception:  # never a traceback to the client
            log.exception("internal error on %s", queued.request.path)
            answer = error(500, "internal error in gpu-admission; see the webhook log")
        if not self._respond(answer, queued):
            return
        while self._waiting:
            if not self._handle(self._waiting.pop(0)) or self._later is not None:
                return
        if self.transport is not None and not self._write_paused and not self._ignoring:
            self.transport.resume_reading()

    # --- answers and cuts ------------------------------------------------------------------

    def _write(self, data: bytes, close: bool) -> None:
        transport = self.transport
        if transport is None:
            return
        transport.write(data)
        if close:
            self._closing()
            transport.close()  # after what was written goes out (the sweep bounds how long)

    def _refuse_with(self, exc: Refused) -> None:
        self._refuse(exc.status, str(exc), exc.metric, linger=exc.linger)

    def _refuse(self, status: int, reason: str, metric: str, *, linger: bool = True) -> None:
        """Answer `status` and close. With `linger`, what the client still sends is read and
        dropped for a short while first, so it gets to read the answer instead of a reset."""
        CUT.labels(metric).inc()
        self.receiving = False
        self._first, self._buffer = b"", None
        self._lease.release()
        transport = self.transport
        if transport is None:
            return
        data = encode_answer(error(status, reason), close=True)
        self._closing()
        transport.write(data)
        if linger:
            loop = asyncio.get_running_loop()
            self._linger = loop.call_later(self.state.limits.linger, transport.close)
        else:
            transport.close()

    def body_overdue(self) -> None:
        """Called by the sweep: the body did not arrive within the body timeout."""
        within = f"request body not received within {self.state.limits.body_timeout:g} s"
        self._refuse(408, within, "body_timeout", linger=False)

    def cut(self, reason: str) -> None:
        """Drop a client that broke a limit: no goodbye, its memory is freed at once."""
        CUT.labels(reason).inc()
        self._closing()
        self.abort()

    def abort(self) -> None:
        """Drop the connection now, whatever is unsent (a close that never finishes)."""
        if self.transport is not None:
            self.transport.abort()

    def evict(self) -> None:
        """Make room at the cap: an idle keep-alive connection is closed politely (its client
        sees a clean close), one in its handshake, head, body or unread answers is dropped."""
        CUT.labels(f"evicted_{self.phase.value}").inc()
        phase = self.phase
        self._closing()
        if self.handshake is not None:
            self.handshake.cancel()
        elif self.transport is None:
            return
        elif phase is Phase.IDLE:
            self.transport.close()
        else:
            self.transport.abort()

    def close(self) -> None:
        """At shutdown: close an idle connection now, a busy one after its answer."""
        if self.busy:
            self.close_after_response = True
        elif self.transport is not None and self.phase is not Phase.CLOSING:
            self._closing()
            self.transport.close()

    def _closing(self) -> None:
        """Nothing more is read or answered; the sweep drops it if the close never ends."""
        if self.phase is not Phase.CLOSING:
            self.phase = Phase.CLOSING
            self.since = self.listener.now()
        self._ignoring = True

    async def settled(self, timeout: float) -> None:
        """Wait (at most `timeout`) for the request under way to be answered."""
        if not self.busy:
            return
        self.close_after_response = True
        self._settled = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), timeout)


def _reason_of(answer: Answer) -> str:
    reason = orjson.loads(answer.body).get("error") if answer.body.startswith(b"{") else None
    return reason if isinstance(reason, str) else "not found"


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text[:200]
