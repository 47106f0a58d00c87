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
from webhook.server import process
from webhook.server.admission import Admission
from webhook.server.certexpiry import watch_serving_cert
from webhook.server.components import unattended_namespaces
from webhook.server.http.limits import Limits, ServerState
from webhook.server.http.ports import serve_until_signalled
from webhook.server.http.routes import Routes
from webhook.server.http.tls import make_ssl_context
from webhook.server.metrics import (
    decisions,
    watch_cluster_facts,
)
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
    hold_settle_seconds: float = 10.0,
    release_memory: bool = True,
    profile_stages: bool = False,
) -> None:
    """Load the rules, then serve until SIGTERM/SIGINT, and drain without cutting a request.

    Broken rules at start-up do not stop the server: it stays unready (`/readyz` 503) and
    keeps watching, so fixing the ConfigMap is enough to recover. `probe_port` None (flag 0)
    serves the probes and /metrics on the webhook port instead.
    """
    log.info("engine build: %s", engine_build())
    holder = RuleHolder(source=rules_dir)
    holder.refresh()
    ctx = make_ssl_context(cert, key, client_ca)
    source = cluster_source(
        snapshot=cluster_snapshot,
        kubeconfig=kubeconfig,
        in_cluster=in_cluster,
        hold_seconds=hold_seconds,
        hold_settle_seconds=hold_settle_seconds,
        on_relist=process.freeze_after_relist,
    )
    if source.live is not None:
        live = source.live
        watch_cluster_facts(live.age_seconds, lambda: live.pod_count)
    if release_memory:
        process.map_large_buffers()
    state = ServerState(limits, release_memory=release_memory)
    totals = StageTotals() if profile_stages else None
    if totals is not None:
        totals.install()
        log.warning("timing every review's stages (--profile-stages): GET /debug/stages")
    app = make_app(holder, source, state=state, probes=probe_port is None, profile=totals)
    probe_app = None if probe_port is None else make_probe_app(holder, source, state=state)
    app.contexts.append(_cert_reloader(ctx, cert, key, cert_check_seconds))
    watch_serving_cert(cert)
    app.contexts.append(rule_watcher(holder, rules_check_seconds))
    if source.live is not None:  # warn of built-in exempt namespaces without their component
        app.contexts.append(_background(unattended_namespaces(holder, source.live)))
    if source.reservations is not None:
        app.contexts.append(hold_expirer(source.reservations))
        REGISTRY.register(_HoldMetrics(source.reservations))
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a Linux/macOS dependency
        loop_factory = None
    process.freeze_heap()
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
