"""The HTTPS front door: aiohttp routes, TLS, and the one place exceptions become statuses."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

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

__all__ = ["CLUSTER", "MAX_BODY", "RULES", "ClusterSource", "make_app", "make_ssl_context", "serve"]

log = logging.getLogger("gpu-admission")

# The apiserver caps objects at ~1.5 MiB in etcd; 8 MiB leaves room for oldObject and options.
MAX_BODY = 8 * 1024 * 1024


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
            counted(request.path.strip("/"), "", "error").inc()
            return _error(400, str(exc))
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"request body over {MAX_BODY} bytes")
        except web.HTTPException:
            raise
        except Exception:
            log.exception("internal error on %s", request.path)
            return _error(500, "internal error in gpu-admission; see the webhook log")

    return guarded


def _review_handler(stage: Stage) -> Handler:
    """One review, read top to bottom: decode, decide, encode once, record once, then hold."""
    endpoint = stage.value
    latency = LATENCY.labels(endpoint)

    async def handle(request: web.Request) -> web.Response:
        rules = request.app[RULES].current  # read once: a reload can't change it mid-request
        if rules is None:
            return _error(503, "no valid rule set loaded yet")
        body = await request.read()
        started = time.perf_counter()
        review = decode(body).request
        source = request.app[CLUSTER]
        subject, decision = decide(stage, review, rules, source.facts)
        answer = respond(review.uid, decision)
        record(endpoint, review, subject, decision, fast=decision is None and not skipped(review))
        # What an admitted pod holds until the watch shows it; never for a dry run.
        hold = decision.hold if decision is not None else None
        if hold is not None and source.reservations is not None and not review.dry_run:
            source.reservations.hold(hold)
        latency.observe(time.perf_counter() - started)
        return web.Response(body=answer, content_type="application/json")

    return handle


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(body=render(), headers={"Content-Type": CONTENT_TYPE})


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _readyz(request: web.Request) -> web.Response:
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


def live_source(kubeconfig: Path | None) -> ClusterSource:
    """Facts from the API server: a kubeconfig file, or the pod's service account in-cluster."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig is not None:
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    reservations = Reservations()
    live = LiveCache(client.ApiClient(cfg), reservations=reservations, on_relist=_freeze_after)
    return ClusterSource(ReservingFacts(live, reservations), reservations, live)


def _freeze_after(kind: str) -> None:
    """After a pods relist: 100k summaries are long-lived, so move them out of the cyclic GC's
    sight, or every full collection walks them all and shows as a p99 spike in admission."""
    if kind == "pods":
        gc.collect()
        gc.freeze()


def make_app(rules: RuleHolder, cluster: ClusterSource | None = None) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app[RULES] = rules
    app[CLUSTER] = cluster or ClusterSource()
    app.router.add_post("/mutate", _guarded(_review_handler(Stage.MUTATE)))
    app.router.add_post("/validate", _guarded(_review_handler(Stage.VALIDATE)))
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.cleanup_ctx.append(_run_live_cache)
    return app


def make_ssl_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """TLS 1.2+; with `client_ca`, only clients holding a certificate it signed get through
    (the apiserver presents one when its admission config names a client cert)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
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


def _rule_watcher(interval: float) -> Callable[[web.Application], AsyncIterator[None]]:
    """Poll the rule folder; loading takes milliseconds, so it runs on the loop between requests."""

    async def loop(app: web.Application) -> None:
        holder = app[RULES]
        while True:
            await asyncio.sleep(interval)
            try:
                holder.refresh()
            except Exception:  # never let the watcher die: the webhook must keep serving
                log.exception("rule reload failed unexpectedly")

    return _background(loop)


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
    rules_dir: Path,
    cert_check_seconds: float = 10.0,
    rules_check_seconds: float = 2.0,
    cluster_snapshot: Path | None = None,
    kubeconfig: Path | None = None,
    in_cluster: bool = False,
    client_ca: Path | None = None,
) -> None:
    """Load the rules, then serve until SIGTERM/SIGINT; in-flight requests are drained.

    Broken rules at start-up do not stop the server: it stays unready (`/readyz` 503) and
    keeps watching, so fixing the ConfigMap is enough to recover.
    """
    holder = RuleHolder(source=rules_dir)
    holder.refresh()
    ctx = make_ssl_context(cert, key, client_ca)
    source = ClusterSource()
    if cluster_snapshot is not None:
        source.reservations = Reservations()
        source.facts = ReservingFacts(load_snapshot(cluster_snapshot), source.reservations)
        log.info("cluster facts from the snapshot %s", cluster_snapshot)
    elif kubeconfig is not None or in_cluster:
        source = live_source(kubeconfig)
        live = source.live
        assert live is not None
        watch_cluster_facts(live.age_seconds, lambda: live.pod_count)
        log.info("cluster facts from list+watch (%s)", kubeconfig or "in-cluster")
    else:
        log.warning("no cluster facts: quota, priority and schedulability rules are off")
    app = make_app(holder, source)
    app.cleanup_ctx.append(_cert_reloader(ctx, cert, key, cert_check_seconds))
    app.cleanup_ctx.append(_rule_watcher(rules_check_seconds))
    loop: asyncio.AbstractEventLoop | None = None
    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is a Linux/macOS dependency
        loop = None
    # Everything loaded so far lives as long as the process: take it out of the cyclic GC's
    # sight, and collect the young generation less often, so per-request garbage (a parsed
    # object is a few hundred dicts) does not trigger walks over the whole heap.
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    log.info("serving on https://%s:%d with rules from %s", host, port, rules_dir)
    web.run_app(
        app,
        host=host,
        port=port,
        ssl_context=ctx,
        access_log=None,
        print=None,
        shutdown_timeout=20.0,
        loop=loop,
    )
