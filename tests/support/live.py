"""The live cache on the fake API server (tests/support/fake_apiserver.py), and waiting for
what a watch delivers."""

from __future__ import annotations

import time
from typing import Any

import yaml

from tests.support.paths import ROOT


def live_cache(server: Any, **kwargs: Any) -> Any:
    """A LiveCache on the fake API server, with short watch timeouts and backoff; stopped
    (its watches ended, its client's connections closed) when the server stops, if not before."""
    from kubernetes import client

    from webhook.facts.live import LiveCache

    cfg = client.Configuration()
    cfg.host = server.url
    return server.serves(
        LiveCache(client.ApiClient(cfg), watch_timeout=5, max_backoff=0.5, **kwargs)
    )


def cluster_role_grants() -> dict[tuple[str, str], set[str]]:
    """(API group, resource) -> verbs the webhook's ClusterRole grants (manifests/base)."""
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "base" / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    return {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def eventually(check: Any, seconds: float = 10) -> None:
    """Wait for `check()` to hold: what a watch delivers arrives a little later."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)
