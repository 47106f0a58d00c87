"""Where `serve` takes its cluster facts from: nothing, a snapshot file, or the live cache
fed by list+watch, with the GPU holds of admitted pods laid over either."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from webhook.facts.holdtimes import HOLD_SECONDS, HOLD_SETTLE_SECONDS
from webhook.facts.live import LiveCache
from webhook.facts.model import FactsSource
from webhook.facts.reservations import Reservations, ReservingFacts
from webhook.facts.snapshotfile import load_snapshot
from webhook.facts.watched import WATCHED

__all__ = ["ClusterSource", "cluster_source", "live_source"]

log = logging.getLogger("gpu-admission")


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


def live_source(
    kubeconfig: Path | None,
    hold_seconds: float = HOLD_SECONDS,
    hold_settle_seconds: float = HOLD_SETTLE_SECONDS,
    *,
    on_relist: Callable[[str], None] | None = None,
) -> ClusterSource:
    """Facts from the API server: a kubeconfig file, or the pod's service account in-cluster.
    A hold ends `hold_settle_seconds` after it was taken while the pods watch is current, or
    later when a validating webhook on pods may take longer (`Reservations.periods`).
    `on_relist` is called with a kind's name after each relist of it."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig is not None:
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    # One pooled connection per watched kind (each watch holds one open) and a few for lists:
    # at the client's default (5 per core) finished watches are dropped, with a warning each.
    cfg.connection_pool_maxsize = len(WATCHED) + 4
    reservations = Reservations(ttl=hold_seconds, settle=hold_settle_seconds)
    live = LiveCache(client.ApiClient(cfg), reservations=reservations, on_relist=on_relist)
    return ClusterSource(ReservingFacts(live, reservations), reservations, live)


def cluster_source(
    *,
    snapshot: Path | None = None,
    kubeconfig: Path | None = None,
    in_cluster: bool = False,
    hold_seconds: float = HOLD_SECONDS,
    hold_settle_seconds: float = HOLD_SETTLE_SECONDS,
    on_relist: Callable[[str], None] | None = None,
) -> ClusterSource:
    """The facts `serve` judges with, GPU holds lasting `hold_seconds` (0: none) included.
    From a snapshot no watch will ever show a pod: holds last their full period."""
    if snapshot is not None:
        reservations = Reservations(ttl=hold_seconds)
        log.info("cluster facts from the snapshot %s", snapshot)
        return ClusterSource(ReservingFacts(load_snapshot(snapshot), reservations), reservations)
    if kubeconfig is not None or in_cluster:
        source = live_source(kubeconfig, hold_seconds, hold_settle_seconds, on_relist=on_relist)
        log.info("cluster facts from list+watch (%s)", kubeconfig or "in-cluster")
        return source
    log.warning("no cluster facts: quota, priority and schedulability rules are off")
    return ClusterSource()
