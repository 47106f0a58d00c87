"""The webhook's routes and their wiring: one review reads top to bottom in `_review_handler`,
`_guarded` is the one place exceptions become statuses, and `serve` puts it all together.

Probes and /metrics live on a separate plain-HTTP port, so `--client-ca` can lock the webhook
port to the apiserver without locking out the kubelet and Prometheus. What each client may
cost is kept below the routes: limits.py, connections.py, body.py; ports.py starts and drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook.engine.pipeline import Stage
from webhook.facts.live import LiveCache
from webhook.facts.model import FactsSource
from webhook.facts.reservations import Reservations, ReservingFacts
from webhook.facts.snapshotfile import load_snapshot
from webhook.server.admission import decide, skipped
from webhook.server.body import Lease, Refused, read_body
from webhook.server.connections import CUT, Connection
from webhook.server.limits import MAX_BODY, STATE, Limits, ServerState, map_large_buffers
from webhook.server.metrics import CONTENT_TYPE, TALLY, record, render, watch_cluster_facts
from webhook.server.ports import serve_until_signalled
from webhook.server.reload import RuleHolder
from webhook.server.review import BadReview, decode, respond
from webhook.server.stages import OFF, StageTotals
from webhook.server.tls import make_ssl_context

__all__ = [
    "CLUSTER",
    "RULES",
    "ClusterSource",
    "cluster_source",
    "hold_expirer",
    "make_app",
    "make_probe_app",
    "rule_watcher",
    "serve",
]

log = logging.getLogger("gpu-admission")

RULES = web.AppKey("rules", RuleHolder)


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
# Set when `serve --profile-stages` times each review's stages (webhook/server/stages.py).
PROFILE = web.AppKey("profile", StageTotals)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, reason: str) -> web.Response:
    return web.Response(
        status=status, body=orjson.dumps({"error": reason}), content_type="application/json"
    )


def _guarded(handler: Handler) -> Handler:
    """Map exceptions to HTTP statuses; no traceback ever reaches the client.

    The one place that does it, wrapped around the review routes (the others cannot fail);
    a wrapper rather than an aiohttp middleware, which costs every request a dispatch layer.
    """

    async def guarded(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except BadReview as exc:
            TALLY.request(request.path.strip("/"), "", "error")
            return _error(400, str(exc))
        except Refused as exc:
            CUT.labels(exc.metric).inc()
            response = _error(exc.status, str(exc))
            response.force_close()  # the rest of the body is not worth reading
            if not exc.linger and isinstance(request.protocol, Connection):
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


def _review_handler(stage: Stage) -> Handler:
    """One review, read top to bottom: decode, decide, encode once, record once, then hold."""
    endpoint = stage.value

    async def handle(request: web.Request) -> web.Response:
        app = request.app
        rules = app[RULES].current  # read once: a reload can't change it mid-request
        if rules is None:
            return _error(503, "no valid rule set loaded yet")
        state = app[STATE]
        lease = Lease(state)
        try:
            body = await read_body(request, state, lease)
            started = time.perf_counter()
            profile = app.get(PROFILE)
            watch = profile.start() if profile is not None else OFF
            review = decode(body).request
            watch.lap("decode")
            source = app[CLUSTER]
            subject, decision = decide(stage, review, rules, source.facts, watch)
            answer = respond(review.uid, decision)
            watch.lap("encode")
            fast = decision is None and not skipped(review, rules)
            record(endpoint, review, subject, decision, fast=fast)
            watch.lap("metrics")
            # What an admitted pod holds until the watch shows it; never for a dry run.
            hold = decision.hold if decision is not None else None
            if hold is not None and source.reservations is not None and not review.dry_run:
                source.reservations.hold(hold)
            TALLY.observe(endpoint, time.perf_counter() - started)
            watch.lap("hold")
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


def serve(
    *,
    host: str,
    port: int,
    cert: Path,
    key: Path,
    rules_dir: Path | None,
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
    profile_stages: bool = False,
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
    if profile_stages:
        totals = app[PROFILE] = StageTotals()
        totals.install()
        app.router.add_get("/debug/stages", totals.handler)
        log.warning("timing every review's stages (--profile-stages): GET /debug/stages")
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
            serve_until_signalled(
                app,
                probe_app,
                host=host,
                port=port,
                probe_port=probe_port or 0,
                ssl_context=ctx,
                drain_seconds=drain_seconds,
            )
        )
