"""The webhook's routes and their wiring: one review reads top to bottom in
`Admission.review` (admission.py), and `serve` puts it all together.

Probes and /metrics live on a separate plain-HTTP port, so `--client-ca` can lock the webhook
port to the apiserver without locking out the kubelet and Prometheus. The HTTP itself, and
what each client may cost, is the HTTP wing's (`webhook.server.http`); the cluster facts come
from `webhook.facts.sources`; process-wide GC and allocator tuning is process.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook.engine.build import engine_build
from webhook.engine.pipeline import Stage
from webhook.facts.reservations import Reservations
from webhook.facts.sources import ClusterSource, cluster_source
from webhook.ruleset.files import rules_folder
from webhook.server import process
from webhook.server.admission import Admission
from webhook.server.certexpiry import watch_serving_cert
from webhook.server.components import unattended_namespaces
from webhook.server.http.ports import serve_until_signalled
from webhook.server.http.routes import Routes
from webhook.server.http.state import ServerState
from webhook.server.http.tls import make_ssl_context
from webhook.server.metrics import decisions, watch_cluster_facts
from webhook.server.options import ServeOptions
from webhook.server.reload import RuleHolder
from webhook.server.stages import StageTotals

__all__ = [
    "Admission",
    "hold_expirer",
    "make_app",
    "make_probe_app",
    "rule_watcher",
    "serve",
]

log = logging.getLogger("gpu-admission")

# The probe port takes GETs: a body is never needed there, and a large one is refused at once.
PROBE_MAX_BODY = 4096


def live_cache_context(cluster: ClusterSource) -> Callable[[], AsyncIterator[None]]:
    """Start the live cache (if any) with the server, stop it with it."""

    async def run() -> AsyncIterator[None]:
        live = cluster.live
        if live is not None:
            live.start()
        yield
        if live is not None:
            await asyncio.get_running_loop().run_in_executor(None, live.stop)

    return run


def make_app(
    rules: RuleHolder,
    cluster: ClusterSource | None = None,
    *,
    state: ServerState | None = None,
    probes: bool = True,
    profile: StageTotals | None = None,
) -> Routes:
    """/mutate and /validate; with `probes`, also /healthz, /readyz and /metrics (one port)."""
    admission = Admission(rules, cluster or ClusterSource(), state or ServerState(), profile)
    routes = Routes(admission.state)
    routes.add("POST", "/mutate", admission.review(Stage.MUTATE))
    routes.add("POST", "/validate", admission.review(Stage.VALIDATE))
    if probes:
        admission.add_probes(routes)
    if profile is not None:
        routes.add("GET", "/debug/stages", admission.stages)
    routes.contexts.append(live_cache_context(admission.cluster))
    return routes


def make_probe_app(
    rules: RuleHolder, cluster: ClusterSource | None = None, *, state: ServerState | None = None
) -> Routes:
    """The plain-HTTP port: /healthz, /readyz and /metrics, never a review."""
    admission = Admission(rules, cluster or ClusterSource(), state or ServerState())
    routes = Routes(admission.state, max_body=PROBE_MAX_BODY)
    admission.add_probes(routes)
    return routes


def _background(make: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], AsyncIterator[None]]:
    """A context that runs `make()` as a task while the port serves, cancelled at exit."""

    async def run() -> AsyncIterator[None]:
        task = asyncio.create_task(make())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return run


def rule_watcher(holder: RuleHolder, interval: float) -> Callable[[], AsyncIterator[None]]:
    """Poll the rule folder. Loading runs in a worker thread, so a slow or hostile rule set
    never stalls a review or a probe; the swap is made back on the loop."""

    async def loop() -> None:
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
) -> Callable[[], AsyncIterator[None]]:
    """Drop expired GPU holds once a second, so holds for namespaces that are never asked
    about again do not pile up, and name in the decision log the holds that ended without the
    watch showing their pod: a create refused further down the chain, or a forged review."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(every)
            reservations.expire()
            log_unmatched(reservations)

    return _background(loop)


def log_unmatched(reservations: Reservations) -> None:
    """One decision-log line for the holds that ended unmatched since the last one."""
    ended = reservations.take_unmatched()
    if not ended:
        return
    decisions.warning(
        "GPU holds ended without the watch showing their pod (refused later in the admission "
        "chain, or a review no create followed): %s",
        ", ".join(f"{namespace}/{name}" for namespace, name in ended),
        extra={"event": "hold-unmatched", "holds": [f"{ns}/{name}" for ns, name in ended]},
    )


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
        yield CounterMetricFamily(
            "gpu_admission_gpu_holds_unmatched",
            "GPU holds that ended without the watch showing their pod: creates refused later "
            "in the admission chain, or reviews posted without a create (forged).",
            value=self.reservations.unmatched,
        )


def _stamp(*paths: Path) -> tuple[float, ...]:
    return tuple(p.stat().st_mtime if p.exists() else 0.0 for p in paths)


def _cert_reloader(
    ctx: ssl.SSLContext, cert: Path, key: Path, interval: float
) -> Callable[[], AsyncIterator[None]]:
    """Reload the serving cert when its files change (cert-manager rotates them in place).

    `load_cert_chain` on the live context affects new handshakes only; open connections keep
    theirs, so nothing is dropped.
    """

    async def loop() -> None:
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


def serve(options: ServeOptions) -> None:
    """Load the rules, then serve until SIGTERM/SIGINT, and drain without cutting a request.

    Broken rules at start-up do not stop the server: it stays unready (`/readyz` 503) and
    keeps watching, so fixing the ConfigMap is enough to recover. `--probe-port 0` serves the
    probes and /metrics on the webhook port instead.
    """
    log.info("engine build: %s", engine_build())
    holder = RuleHolder(source=rules_folder(options.rules))
    holder.refresh()
    ctx = make_ssl_context(options.cert, options.key, options.client_ca)
    source = _cluster_facts(options)
    if options.release_memory:
        process.map_large_buffers()
    state = ServerState(options.limits, release_memory=options.release_memory)
    app, probe_app = _ports(options, holder, source, state)
    app.contexts.append(_cert_reloader(ctx, options.cert, options.key, options.cert_check_seconds))
    watch_serving_cert(options.cert)
    app.contexts.append(rule_watcher(holder, options.rules_check_seconds))
    if source.live is not None:  # warn of built-in exempt namespaces without their component
        app.contexts.append(_background(unattended_namespaces(holder, source.live)))
    if source.reservations is not None:
        app.contexts.append(hold_expirer(source.reservations))
        REGISTRY.register(_HoldMetrics(source.reservations))
    process.freeze_heap()
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(
            serve_until_signalled(
                app,
                probe_app,
                host=options.host,
                port=options.port,
                probe_port=options.probe_port,
                ssl_context=ctx,
                drain_seconds=options.drain_seconds,
            )
        )


def _cluster_facts(options: ServeOptions) -> ClusterSource:
    """The facts to judge with, as the options say; a live cache is watched by the metrics,
    and the GC is frozen after each of its pods relists."""
    source = cluster_source(
        snapshot=options.cluster_snapshot,
        kubeconfig=options.kubeconfig,
        in_cluster=options.reads_cluster_in_pod(os.environ),
        hold_seconds=options.hold_seconds,
        hold_settle_seconds=options.hold_settle_seconds,
        on_relist=process.freeze_after_relist,
    )
    live = source.live
    if live is not None:
        watch_cluster_facts(live.age_seconds, lambda: live.pod_count)
    return source


def _ports(
    options: ServeOptions, holder: RuleHolder, source: ClusterSource, state: ServerState
) -> tuple[Routes, Routes | None]:
    """The webhook port's routes, and the probe port's unless the probes share the first."""
    totals = StageTotals() if options.profile_stages else None
    if totals is not None:
        totals.install()
        log.warning("timing every review's stages (--profile-stages): GET /debug/stages")
    apart = options.separate_probe_port
    app = make_app(holder, source, state=state, probes=apart is None, profile=totals)
    probe_app = None if apart is None else make_probe_app(holder, source, state=state)
    return app, probe_app


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (Linux, macOS), else asyncio's own."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a Linux/macOS dependency
        return None
    return uvloop.new_event_loop
