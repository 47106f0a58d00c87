"""The HTTPS front door: aiohttp routes, TLS, bounded work per client, and graceful shutdown.

Who can reach the webhook port is not only the apiserver (README, "Threat model"), so every
client gets bounded time and memory: a TLS handshake and a request head within
`header_timeout`, a body within `body_timeout`, an idle keep-alive connection for
`idle_timeout`; at most `max_connections` connections, counted from accept, one that is doing
no request's work evicted to make room for a new one; a body over `max_body` refused from its
Content-Length before a byte is read (chunked bodies cut at the limit), and bodies over
SMALL_BODY drawing on one shared `body_memory` budget, so a crowd of stalled uploads gets 503s
instead of the memory limit. The connection layer (`_Listener`, `_Connection`) sits under
aiohttp's own request handling and changes nothing above it.

Probes and /metrics live on a separate plain-HTTP port, so `--client-ca` can lock the webhook
port to the apiserver without locking out the kubelet and Prometheus.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import gc
import inspect
import logging
import signal
import socket
import ssl
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse
from aiohttp.web_server import Server
from prometheus_client import REGISTRY, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook.engine.pipeline import Stage
from webhook.facts.live import LiveCache
from webhook.facts.model import FactsSource
from webhook.facts.reservations import Reservations, ReservingFacts
from webhook.facts.snapshotfile import load_snapshot
from webhook.server.admission import decide, skipped
from webhook.server.metrics import (
    CONTENT_TYPE,
    LATENCY,
    counted,
    record,
    render,
    watch_cluster_facts,
)
from webhook.server.reload import RuleHolder
from webhook.server.review import BadReview, decode, respond

__all__ = [
    "CLUSTER",
    "MAX_BODY",
    "RULES",
    "STATE",
    "ClusterSource",
    "Limits",
    "ServerState",
    "Servers",
    "cluster_source",
    "hold_expirer",
    "make_app",
    "make_probe_app",
    "make_ssl_context",
    "rule_watcher",
    "serve",
    "start_servers",
]

log = logging.getLogger("gpu-admission")

MiB = 1024 * 1024
# The apiserver caps objects at ~1.5 MiB in etcd; 8 MiB leaves room for oldObject and options.
MAX_BODY = 8 * MiB
# Bodies up to this size (a pod review is 5-50 KiB) are read without asking the shared budget,
# so stalled large uploads can never crowd out ordinary reviews.
SMALL_BODY = 128 * 1024
# After a body this large, glibc is asked to hand freed pages back (malloc_trim), at most
# once per TRIM_INTERVAL seconds: without it, RSS stays at its high-water mark.
TRIM_AFTER = 1 * MiB
TRIM_INTERVAL = 0.5
# A request that has its body still has this long to be answered and written out: a client
# that does not read its answer would otherwise hold its connection forever.
RESPONSE_GRACE = 5.0
# A cut or evicted TLS connection gets this long for the TLS goodbye before it is dropped.
TLS_SHUTDOWN_SECONDS = 5.0
# The probe port answers the kubelet and Prometheus: a handful of connections at most.
PROBE_MAX_CONNECTIONS = 32
# Request heads: the apiserver sends a short request line and a dozen small headers.
# At most 32 x 4 KiB = 128 KiB of head per connection (aiohttp allows 128 x 8 KiB).
HEAD_LIMITS = {"max_line_size": 4096, "max_field_size": 4096, "max_headers": 32}

CUT = Counter(
    "gpu_admission_clients_cut_total",
    "Connections or requests cut to keep each client's work bounded, by reason "
    "(connection_cap, evicted_idle, evicted_handshake, evicted_head, header_timeout, "
    "request_timeout, body_timeout, body_too_large, body_budget).",
    ["reason"],
)


@dataclass(frozen=True)
class Limits:
    """What clients may cost the server; `serve` flags. The defaults fit the Deployment's
    256 MiB: the ~55 MiB baseline, 256 connections each holding a head or a small body (128 KiB
    at most, 32 MiB in all) and a TLS read buffer (256 KiB while data streams in, 64 MiB in
    all), and the 64 MiB large-body budget (README, "Threat model")."""

    max_body: int = MAX_BODY
    body_memory: int = 64 * MiB
    max_connections: int = 256
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    # Longer than the Go client's 90 s idle timeout (the apiserver's), so the client closes an
    # idle connection first and never sends a request into one the server is closing.
    idle_timeout: float = 120.0
    # After a 413, unread body is read and dropped for this long, so the client gets to read
    # the answer instead of a reset; then the connection closes.
    linger: float = 2.0

    @property
    def request_timeout(self) -> float:
        return self.body_timeout + RESPONSE_GRACE


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None (musl, macOS): only an optimisation."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return cast(Callable[[int], int], trim)


# glibc's mallopt parameters. Buffers of 1 MiB or more (large bodies) are mapped on their own;
# the heap top is trimmed past 2 MiB free, glibc's own ratio. Lower thresholds cost every
# request: a TLS read allocates a 256 KiB buffer, which would then be mapped and unmapped
# (or the heap grown and trimmed) each time, ~25% more CPU per review.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 1 * MiB
TRIM_THRESHOLD = 2 * MiB


def map_large_buffers() -> bool:
    """Have glibc map every buffer of 1 MiB or more on its own, so freeing one gives its
    memory straight back to the OS. glibc's default threshold grows (up to 32 MiB) after the
    first large free, after which body buffers and TLS reads come from the heap and RSS stays
    at its high-water mark (bench/abuse.py, stalled uploads; figures in the README's "Threat
    model"). Process-wide, so `serve` calls it, not the app."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


class ServerState:
    """What both ports share: limits, the large-body budget, and whether shutdown began."""

    def __init__(self, limits: Limits | None = None, *, release_memory: bool = True) -> None:
        self.limits = limits or Limits()
        self.draining = False  # SIGTERM seen: /readyz fails, answers say Connection: close
        self.body_bytes = 0  # large-body bytes promised to requests being read or handled
        self._trim = _malloc_trim() if release_memory else None
        self._trim_pending = False
        self._trimmed_at = float("-inf")

    def take(self, n: int) -> bool:
        """Promise `n` more bytes of large body, if the budget has them."""
        if self.body_bytes + n > self.limits.body_memory:
            return False
        self.body_bytes += n
        return True

    def give(self, n: int) -> None:
        self.body_bytes -= n
        if n >= TRIM_AFTER:
            self._trim_soon()

    def _trim_soon(self) -> None:
        """Hand freed memory back to the OS soon, after the body's last reference is gone."""
        if self._trim is None or self._trim_pending:
            return
        loop = asyncio.get_running_loop()
        self._trim_pending = True
        loop.call_later(max(0.0, self._trimmed_at + TRIM_INTERVAL - loop.time()), self._trim_now)

    def _trim_now(self) -> None:
        self._trim_pending = False
        self._trimmed_at = asyncio.get_running_loop().time()
        if self._trim is not None:
            self._trim(0)


RULES = web.AppKey("rules", RuleHolder)
STATE = web.AppKey("state", ServerState)


@dataclass
class ClusterSource:
    """Where cluster facts come from: none, a snapshot file, or the live cache."""

    facts: FactsSource | None = None  # already includes the reservations
    reservations: Reservations | None = None
    live: LiveCache | None = None  # set when the facts come from list+watch

    @property
    def ready(self) -> bool:
        """Live facts must have synced once; a snapshot or no source is ready at once."""
        return self.live is None or self.live.synced


CLUSTER = web.AppKey("cluster", ClusterSource)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, reason: str) -> web.Response:
    return web.Response(
        status=status, body=orjson.dumps({"error": reason}), content_type="application/json"
    )


class _Refused(Exception):
    """A request cut to bound its cost: answered with `status`, and its connection closed."""

    def __init__(self, status: int, reason: str, metric: str, *, linger: bool = True) -> None:
        super().__init__(reason)
        self.status = status
        self.metric = metric
        self.linger = linger  # False: close right after the answer, read no more of the body


def _guarded(handler: Handler) -> Handler:
    """Map exceptions to HTTP statuses; no traceback ever reaches the client.

    The one place that does it, wrapped around the review routes (the others cannot fail);
    a wrapper rather than an aiohttp middleware, which costs every request a dispatch layer.
    """

    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except BadReview as exc:
            counted(request.path.strip("/"), "", "error").inc()
            return _error(400, str(exc))
        except _Refused as exc:
            CUT.labels(exc.metric).inc()
            response = _error(exc.status, str(exc))
            response.force_close()  # the rest of the body is not worth reading
            if not exc.linger and isinstance(request.protocol, _Connection):
                request.protocol.close_after_response = True
            return response
        except web.RequestPayloadError:  # broken chunked encoding, bad compression
            response = _error(400, "malformed request body")
            response.force_close()
            return response
        except ConnectionError:  # the client went away mid-body: nobody to answer
            return _error(400, "connection lost")
        except web.HTTPException:
            raise
        except Exception:
            log.exception("internal error on %s", request.path)
            return _error(500, "internal error in gpu-admission; see the webhook log")

    return guarded


class _Lease:
    """The share of the large-body budget one request holds, given back when it is answered."""

    __slots__ = ("held", "state")

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.held = 0

    def cover(self, size: int) -> None:
        if size <= SMALL_BODY or size <= self.held:
            return
        if not self.state.take(size - self.held):
            # No lingering over the rest: under this pressure, reading and dropping megabytes
            # per refused request is the work an attacker wants the server to do.
            raise _Refused(
                503,
                "busy: too many large request bodies in flight; try again",
                "body_budget",
                linger=False,
            )
        self.held = size

    def release(self) -> None:
        if self.held:
            self.state.give(self.held)
            self.held = 0


class _BodyTimeout(Exception):
    """Set on a body stream by the listener's sweep when the body is overdue."""


async def _read_body(request: web.Request, state: ServerState, lease: _Lease) -> bytes:
    """The body, within the size limit, the budget and the body timeout, or `_Refused`.

    The usual one-chunk body comes back as the very chunk received; larger ones grow one
    buffer (no second copy, unlike `request.read()`), which the decoder reads as it is. The
    body timeout is kept by the listener's once-a-tick sweep, which fails an overdue body's
    stream, rather than by a timer per request (`asyncio.timeout` costs ~5 µs a request).
    """
    limits = state.limits
    too_large = f"request body over {limits.max_body} bytes"
    length = request.content_length
    if length is not None:  # refused before a byte of it is read
        if length > limits.max_body:
            raise _Refused(413, too_large, "body_too_large")
        lease.cover(length)
    content = request.content
    conn = request.protocol if isinstance(request.protocol, _Connection) else None
    first = b""
    buffer: bytearray | None = None
    total = 0
    try:
        if conn is not None:
            conn.body = content
        while chunk := await content.readany():
            total += len(chunk)
            if total > limits.max_body:  # chunked: cut at the limit
                raise _Refused(413, too_large, "body_too_large")
            lease.cover(total)
            if buffer is not None:
                buffer += chunk
            elif not first:
                first = chunk
            else:
                buffer = bytearray(first)
                buffer += chunk
                first = b""
    except _BodyTimeout:
        raise _Refused(
            408,
            f"request body not received within {limits.body_timeout:g} s",
            "body_timeout",
            linger=False,
        ) from None
    finally:
        if conn is not None:
            conn.body = None
    # A bytearray is read by the decoder in place; typed as bytes, which it stands in for.
    return first if buffer is None else cast(bytes, buffer)


def _review_handler(stage: Stage) -> Handler:
    """One review, read top to bottom: decode, decide, encode once, record once, then hold."""
    endpoint = stage.value
    latency = LATENCY.labels(endpoint)

    async def handle(request: web.Request) -> web.Response:
        app = request.app
        rules = app[RULES].current  # read once: a reload can't change it mid-request
        if rules is None:
            return _error(503, "no valid rule set loaded yet")
        state = app[STATE]
        lease = _Lease(state)
        try:
            body = await _read_body(request, state, lease)
            started = time.perf_counter()
            review = decode(body).request
            source = app[CLUSTER]
            subject, decision = decide(stage, review, rules, source.facts)
            answer = respond(review.uid, decision)
            record(
                endpoint, review, subject, decision, fast=decision is None and not skipped(review)
            )
            # What an admitted pod holds until the watch shows it; never for a dry run.
            hold = decision.hold if decision is not None else None
            if hold is not None and source.reservations is not None and not review.dry_run:
                source.reservations.hold(hold)
            latency.observe(time.perf_counter() - started)
        finally:
            lease.release()
        response = web.Response(body=answer, content_type="application/json")
        if state.draining:  # the client reconnects, through the Service, to another replica
            response.force_close()
        return response

    return handle


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(body=render(), headers={"Content-Type": CONTENT_TYPE})


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _readyz(request: web.Request) -> web.Response:
    if request.app[STATE].draining:
        return web.Response(status=503, text="shutting down")
    if request.app[RULES].current is None:
        return web.Response(status=503, text="no valid rule set loaded")
    if not request.app[CLUSTER].ready:
        return web.Response(status=503, text="cluster facts not synced yet")
    return web.Response(text="ok")


async def _run_live_cache(app: web.Application) -> AsyncIterator[None]:
    live = app[CLUSTER].live
    if live is not None:
        live.start()
    yield
    if live is not None:
        await asyncio.get_running_loop().run_in_executor(None, live.stop)


def live_source(kubeconfig: Path | None, hold_seconds: float = 30.0) -> ClusterSource:
    """Facts from the API server: a kubeconfig file, or the pod's service account in-cluster."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig is not None:
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    reservations = Reservations(ttl=hold_seconds)
    live = LiveCache(client.ApiClient(cfg), reservations=reservations, on_relist=_freeze_after)
    return ClusterSource(ReservingFacts(live, reservations), reservations, live)


def _freeze_after(kind: str) -> None:
    """After a pods relist: 100k summaries are long-lived, so move them out of the cyclic GC's
    sight, or every full collection walks them all and shows as a p99 spike in admission."""
    if kind == "pods":
        gc.collect()
        gc.freeze()


def cluster_source(
    *,
    snapshot: Path | None = None,
    kubeconfig: Path | None = None,
    in_cluster: bool = False,
    hold_seconds: float = 30.0,
) -> ClusterSource:
    """The facts `serve` judges with, GPU holds lasting `hold_seconds` (0: none) included."""
    if snapshot is not None:
        reservations = Reservations(ttl=hold_seconds)
        log.info("cluster facts from the snapshot %s", snapshot)
        return ClusterSource(ReservingFacts(load_snapshot(snapshot), reservations), reservations)
    if kubeconfig is not None or in_cluster:
        source = live_source(kubeconfig, hold_seconds)
        live = source.live
        assert live is not None
        watch_cluster_facts(live.age_seconds, lambda: live.pod_count)
        log.info("cluster facts from list+watch (%s)", kubeconfig or "in-cluster")
        return source
    log.warning("no cluster facts: quota, priority and schedulability rules are off")
    return ClusterSource()


def _add_probes(app: web.Application) -> None:
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)


def _shared(
    app: web.Application,
    rules: RuleHolder,
    cluster: ClusterSource | None,
    state: ServerState | None,
) -> web.Application:
    app[RULES] = rules
    app[CLUSTER] = cluster or ClusterSource()
    app[STATE] = state or ServerState()
    return app


def make_app(
    rules: RuleHolder,
    cluster: ClusterSource | None = None,
    *,
    state: ServerState | None = None,
    probes: bool = True,
) -> web.Application:
    """/mutate and /validate; with `probes`, also /healthz, /readyz and /metrics (one port)."""
    app = _shared(web.Application(client_max_size=MAX_BODY), rules, cluster, state)
    app.router.add_post("/mutate", _guarded(_review_handler(Stage.MUTATE)))
    app.router.add_post("/validate", _guarded(_review_handler(Stage.VALIDATE)))
    if probes:
        _add_probes(app)
    app.cleanup_ctx.append(_run_live_cache)
    return app


def make_probe_app(
    rules: RuleHolder, cluster: ClusterSource | None = None, *, state: ServerState | None = None
) -> web.Application:
    """The plain-HTTP port: /healthz, /readyz and /metrics, never a review."""
    app = _shared(web.Application(client_max_size=4096), rules, cluster, state)
    _add_probes(app)
    return app


# Go's crypto/tls offers these under TLS 1.2 too; CBC suites (Lucky13-style padding oracles)
# and non-forward-secret RSA key exchange are left out. TLS 1.3 suites are all AEAD and are
# configured separately by OpenSSL, so this string does not touch them.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def make_ssl_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """TLS 1.2+ with AEAD suites only; with `client_ca`, only clients holding a certificate it
    signed get through (the apiserver presents one when its admission config names one)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_COMPRESSION
    ctx.load_cert_chain(cert, key)
    if client_ca is not None:
        ctx.load_verify_locations(cafile=client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _background(
    make: Callable[[web.Application], Coroutine[Any, Any, None]],
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup_ctx that runs `make(app)` as a task while the app serves, cancelled at exit."""

    async def run(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(make(app))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return run


def rule_watcher(interval: float) -> Callable[[web.Application], AsyncIterator[None]]:
    """Poll the rule folder. Loading runs in a worker thread, so a slow or hostile rule set
    never stalls a review or a probe; the swap is made back on the loop."""

    async def loop(app: web.Application) -> None:
        holder = app[RULES]
        running = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            try:
                rules = await running.run_in_executor(None, holder.prepare)
                if rules is not None:
                    holder.install(rules)
            except Exception:  # never let the watcher die: the webhook must keep serving
                log.exception("rule reload failed unexpectedly")

    return _background(loop)


def hold_expirer(
    reservations: Reservations, every: float = 1.0
) -> Callable[[web.Application], AsyncIterator[None]]:
    """Drop expired GPU holds once a second, so holds for namespaces that are never asked
    about again do not pile up."""

    async def loop(app: web.Application) -> None:
        while True:
            await asyncio.sleep(every)
            reservations.expire()

    return _background(loop)


class _HoldMetrics(Collector):
    """The GPU holds in force and those dropped early by a cap, read at scrape time."""

    def __init__(self, reservations: Reservations) -> None:
        self.reservations = reservations

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        yield GaugeMetricFamily(
            "gpu_admission_gpu_holds",
            "GPU holds in force: admitted pods the watch has not shown yet.",
            value=self.reservations.count,
        )
        yield CounterMetricFamily(
            "gpu_admission_gpu_holds_dropped",
            "GPU holds dropped before their time by the total or per-namespace cap.",
            value=self.reservations.dropped,
        )


def _stamp(*paths: Path) -> tuple[float, ...]:
    return tuple(p.stat().st_mtime if p.exists() else 0.0 for p in paths)


def _cert_reloader(
    ctx: ssl.SSLContext, cert: Path, key: Path, interval: float
) -> Callable[[web.Application], AsyncIterator[None]]:
    """Reload the serving cert when its files change (cert-manager rotates them in place).

    `load_cert_chain` on the live context affects new handshakes only; open connections keep
    theirs, so nothing is dropped.
    """

    async def loop(app: web.Application) -> None:
        seen = _stamp(cert, key)
        while True:
            await asyncio.sleep(interval)
            now = _stamp(cert, key)
            if now == seen:
                continue
            try:
                ctx.load_cert_chain(cert, key)
                seen = now
                log.info("reloaded serving certificate from %s", cert)
            except (ssl.SSLError, OSError) as exc:
                # Mid-rotation the key and cert may not match yet: try again next tick.
                log.warning("serving certificate not reloaded yet: %s", exc)

    return _background(loop)


# --- connections: bounded time per phase, bounded count per port --------------------------------


# How long a connection opened just before shutdown gets to send its first request.
FRESH_GRACE_SECONDS = 0.5


class _Phase(enum.Enum):
    HANDSHAKE = "handshake"  # TLS not done yet: bounded by the handshake timeout
    IDLE = "idle"  # between requests: aiohttp's keep-alive timeout; evictable at the cap
    HEAD = "head"  # part of a request head received: header timeout
    REQUEST = "request"  # head complete, body and answer: request timeout
    CLOSING = "closing"  # cut; waiting for the transport to go


class _Connection(RequestHandler):
    """aiohttp's per-connection protocol, plus the phase it is in and since when, which the
    listener's sweep reads to cut clients that are too slow."""

    def __init__(self, listener: _Listener, manager: Server, **kwargs: Any) -> None:
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
        if isinstance(protocol, _Connection):
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


class _Listener(web.BaseSite):
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
        self.connections: set[_Connection] = set()

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
        conn = _Connection(self, server, loop=loop, **self._kwargs)
        self.connections.add(conn)
        conn.handshake = loop.create_task(self._open(sock, conn))

    async def _open(self, sock: socket.socket, conn: _Connection) -> None:
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

    def forget(self, conn: _Connection) -> None:
        self.connections.discard(conn)

    def _make_room(self) -> bool:
        """At the cap, close one connection that is not doing a request's work, cheapest loss
        first: the longest-idle one that never sent a request, else the oldest still in its
        TLS handshake, else the oldest still sending a request head, else the longest-idle
        one that did send requests (the apiserver's pooled connections). A real client needs
        milliseconds for a handshake or a head, so an attacker holding slots that way must
        outpace every new connection; only when all are mid-request is the new one refused."""
        order: list[Callable[[_Connection], bool]] = [
            lambda c: c.phase is _Phase.IDLE and not c.requests,
            lambda c: c.phase is _Phase.HANDSHAKE,
            lambda c: c.phase is _Phase.HEAD,
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
                    conn.body.set_exception(_BodyTimeout())  # its handler answers 408
                    conn.body = None
                elif waited > limits.request_timeout:
                    conn.cut("request_timeout")


def _handler_kwargs(limits: Limits) -> dict[str, Any]:
    """RequestHandler settings: aiohttp's own keep-alive timeout is the idle timeout."""
    accepted = inspect.signature(RequestHandler.__init__).parameters
    kwargs: dict[str, Any] = {
        "keepalive_timeout": limits.idle_timeout,
        "lingering_time": limits.linger,
        "access_log": None,
    }
    kwargs.update({k: v for k, v in HEAD_LIMITS.items() if k in accepted})
    return kwargs


@dataclass
class Servers:
    """The running listeners and their runners: the webhook port and the probe port."""

    state: ServerState
    webhook: web.AppRunner
    webhook_site: _Listener
    probes: web.AppRunner | None = None
    probe_site: _Listener | None = None
    stopped: bool = field(default=False)

    @property
    def port(self) -> int:
        return self.webhook_site.port

    @property
    def probe_port(self) -> int | None:
        return self.probe_site.port if self.probe_site is not None else None

    async def drain(self, delay: float, cut_short: asyncio.Event | None = None) -> None:
        """Fail readiness and keep serving for `delay` (answers say Connection: close), so the
        endpoint removal reaches every client before the listener closes; then `stop`."""
        self.state.draining = True
        log.info("shutting down: /readyz fails, serving %g s more before closing", delay)
        if cut_short is None:
            await asyncio.sleep(delay)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cut_short.wait(), delay)
        await self.stop()

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish, close idle connections; the probe
        port last, so liveness answers until the end."""
        if not self.stopped:
            log.info("no longer accepting connections; finishing requests in flight")
        await self.close()

    async def close(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.state.draining = True
        await self.webhook.cleanup()
        await self.webhook_site.finish()
        if self.probes is not None:
            await self.probes.cleanup()
        if self.probe_site is not None:
            await self.probe_site.finish()


async def start_servers(
    app: web.Application,
    *,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None,
    probe_app: web.Application | None = None,
    probe_port: int = 0,
) -> Servers:
    """Start the webhook port (and the probe port when `probe_app` is given)."""
    state = app[STATE]
    limits = state.limits
    kwargs = _handler_kwargs(limits)
    runner = web.AppRunner(app, shutdown_timeout=limits.request_timeout, **kwargs)
    await runner.setup()
    site = _Listener(
        runner,
        host,
        port,
        ssl_context=ssl_context,
        limits=limits,
        max_connections=limits.max_connections,
        handler_kwargs=kwargs,
    )
    servers = Servers(state, runner, site)
    try:
        await site.start()
        if probe_app is not None:
            servers.probes = web.AppRunner(probe_app, shutdown_timeout=1.0, **kwargs)
            await servers.probes.setup()
            servers.probe_site = _Listener(
                servers.probes,
                host,
                probe_port,
                ssl_context=None,
                limits=limits,
                max_connections=PROBE_MAX_CONNECTIONS,
                handler_kwargs=kwargs,
            )
            await servers.probe_site.start()
    except BaseException:  # a port in use, mostly: release the other one
        await servers.close()
        raise
    return servers


async def _serve_until_signalled(
    app: web.Application,
    probe_app: web.Application | None,
    *,
    host: str,
    port: int,
    probe_port: int,
    ssl_context: ssl.SSLContext,
    drain_seconds: float,
) -> None:
    servers = await start_servers(
        app,
        host=host,
        port=port,
        ssl_context=ssl_context,
        probe_app=probe_app,
        probe_port=probe_port,
    )
    probes = (
        f"probes and /metrics on http://{host}:{servers.probe_port}"
        if servers.probe_port is not None
        else "probes and /metrics on the same port"
    )
    log.info("serving on https://%s:%d; %s", host, servers.port, probes)
    signalled = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signalled.set)
    try:
        await signalled.wait()
        signalled.clear()  # a second signal cuts the drain delay short
        await servers.drain(drain_seconds, signalled)
    finally:
        await servers.stop()


def serve(
    *,
    host: str,
    port: int,
    cert: Path,
    key: Path,
    rules_dir: Path,
    cert_check_seconds: float = 10.0,
    rules_check_seconds: float = 2.0,
    cluster_snapshot: Path | None = None,
    kubeconfig: Path | None = None,
    in_cluster: bool = False,
    client_ca: Path | None = None,
    probe_port: int | None = 8081,
    limits: Limits | None = None,
    drain_seconds: float = 5.0,
    hold_seconds: float = 30.0,
    release_memory: bool = True,
) -> None:
    """Load the rules, then serve until SIGTERM/SIGINT, and drain without cutting a request.

    Broken rules at start-up do not stop the server: it stays unready (`/readyz` 503) and
    keeps watching, so fixing the ConfigMap is enough to recover. `probe_port` None (flag 0)
    serves the probes and /metrics on the webhook port instead.
    """
    holder = RuleHolder(source=rules_dir)
    holder.refresh()
    ctx = make_ssl_context(cert, key, client_ca)
    source = cluster_source(
        snapshot=cluster_snapshot,
        kubeconfig=kubeconfig,
        in_cluster=in_cluster,
        hold_seconds=hold_seconds,
    )
    if release_memory:
        map_large_buffers()
    state = ServerState(limits, release_memory=release_memory)
    app = make_app(holder, source, state=state, probes=probe_port is None)
    probe_app = None if probe_port is None else make_probe_app(holder, source, state=state)
    app.cleanup_ctx.append(_cert_reloader(ctx, cert, key, cert_check_seconds))
    app.cleanup_ctx.append(rule_watcher(rules_check_seconds))
    if source.reservations is not None:
        app.cleanup_ctx.append(hold_expirer(source.reservations))
        REGISTRY.register(_HoldMetrics(source.reservations))
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a Linux/macOS dependency
        loop_factory = None
    # Everything loaded so far lives as long as the process: take it out of the cyclic GC's
    # sight, and collect the young generation less often, so per-request garbage (a parsed
    # object is a few hundred dicts) does not trigger walks over the whole heap.
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(
            _serve_until_signalled(
                app,
                probe_app,
                host=host,
                port=port,
                probe_port=probe_port or 0,
                ssl_context=ctx,
                drain_seconds=drain_seconds,
            )
        )
