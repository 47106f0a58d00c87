"""The two ports run together: started together, and on SIGTERM drained without cutting a
request (readiness fails first, the webhook port closes, the probe port last)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
from dataclasses import dataclass, field

from webhook.server.http.connections import Listener
from webhook.server.http.routes import Routes
from webhook.server.http.state import ServerState

log = logging.getLogger("gpu-admission")

# The probe port answers the kubelet and Prometheus: a handful of connections at most.
PROBE_MAX_CONNECTIONS = 32


@dataclass
class Servers:
    """The running listeners, the webhook port and the probe port, and what runs beside them
    (the routes' contexts: rule watcher, cert reloader, live cache, hold expiry)."""

    state: ServerState
    webhook_site: Listener
    probe_site: Listener | None = None
    contexts: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
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
        try:
            await self.webhook_site.stop(self.state.limits.request_timeout)
            await self.webhook_site.finish()
        finally:
            await self.contexts.aclose()
            if self.probe_site is not None:
                await self.probe_site.stop(1.0)
                await self.probe_site.finish()


async def start_servers(
    app: Routes,
    *,
    host: str,
    port: int,
    ssl_context: ssl.SSLContext | None,
    probe_app: Routes | None = None,
    probe_port: int = 0,
) -> Servers:
    """Start the webhook port (and the probe port when `probe_app` is given), and what runs
    beside them."""
    state = app.state
    limits = state.limits
    site = Listener(
        app,
        host,
        port,
        ssl_context=ssl_context,
        limits=limits,
        max_connections=limits.max_connections,
    )
    servers = Servers(state, site)
    try:
        for context in app.contexts:
            await servers.contexts.enter_async_context(contextlib.asynccontextmanager(context)())
        await site.start()
        if probe_app is not None:
            servers.probe_site = Listener(
                probe_app,
                host,
                probe_port,
                ssl_context=None,
                limits=limits,
                max_connections=PROBE_MAX_CONNECTIONS,
            )
            await servers.probe_site.start()
    except BaseException:  # a port in use, mostly: release the other one
        await servers.close()
        raise
    return servers


async def serve_until_signalled(
    app: Routes,
    probe_app: Routes | None,
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
