"""Stopping the live cache ends its watch threads even while their streams are quiet: a server
that shuts down on SIGTERM must not wait for the next event or bookmark of every watch (it
would outlast the pod's grace period and be killed mid-drain)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.cluster import seed
from tests.support.fake_apiserver import FakeApiServer
from tests.support.live import eventually
from webhook.facts.live import LiveCache


@pytest.fixture
def quiet_server() -> Iterator[FakeApiServer]:
    """Watches that send nothing for an hour: no event, no bookmark."""
    srv = FakeApiServer(bookmark_interval=3600)
    srv.start()
    seed(srv)
    yield srv
    srv.stop()


def test_stop_ends_every_watch_thread_blocked_on_a_quiet_stream(
    quiet_server: FakeApiServer,
) -> None:
    cfg = client.Configuration()
    cfg.host = quiet_server.url
    live = LiveCache(client.ApiClient(cfg), watch_timeout=3600)
    live.start()
    assert live.wait_synced(10)
    eventually(lambda: {"pods", "nodes"} <= {kind for kind, _ in quiet_server.watches})
    blocked = [t for t in live._threads if t.is_alive()]
    assert blocked
    live.stop(timeout=10)
    assert [t.name for t in blocked if t.is_alive()] == []
