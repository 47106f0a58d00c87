"""GPU holds against an API server that speaks the real list/watch protocol: a hold ends as
soon as a current watch has had the time to show its pod, a forged review holds a budget for
seconds and is named in the log and a metric, and two replicas sharing nothing but the API
server overshoot a webhook-only budget by no more than the bound the docs state."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_apiserver import FakeApiServer
from tests.support.live import eventually, live_cache
from tests.support.webhook import Webhook
from webhook.facts.model import PodGpus
from webhook.facts.reservations import Reservations

GPU = "nvidia.com/gpu"
BUDGET = 8


def seed(server: FakeApiServer) -> None:
    """A namespace with a webhook-only budget of 8 GPUs (no ResourceQuota), nothing running."""
    server.put("namespaces", {"metadata": {"name": "ml-team"}})
    server.put(
        "nodes",
        {
            "metadata": {"name": "h100-0", "labels": {"nvidia.com/gpu.product": "H100"}},
            "status": {"allocatable": {GPU: "8"}, "capacity": {GPU: "8"}},
        },
    )


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    srv = FakeApiServer()
    srv.start()
    seed(srv)
    yield srv
    srv.stop()


def gpu_pod(name: str, gpus: int = 1) -> dict[str, Any]:
    """A GPU pod as a user writes it (the webhook fills in the rest)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-team"},
        "spec": {
            "containers": [
                {
                    "name": "train",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {GPU: str(gpus), "memory": "8Gi"}},
                    "readinessProbe": {"tcpSocket": {"port": 80}},
                }
            ]
        },
    }


def stored(pod: dict[str, Any]) -> dict[str, Any]:
    """What the API server stores for an admitted create: the object, pending."""
    return {**pod, "status": {"phase": "Pending"}}


# ---- the live cache tells the holds whether its pods watch is current -------------------


def test_a_hold_ends_at_its_settle_time_while_the_watch_is_current(
    server: FakeApiServer,
) -> None:
    holds = Reservations(ttl=60, settle=0.5)
    live = live_cache(server, reservations=holds)
    live.start()
    try:
        assert live.wait_synced(10)
        assert live.pods_current()
        holds.hold(PodGpus("ml-team", "ghost", "Pending", {GPU: Fraction(4)}))
        eventually(lambda: holds.expire() == 1 or holds.count == 0)
        assert holds.unmatched == 1
        assert holds.take_unmatched() == [("ml-team", "ghost")]
    finally:
        live.stop()


def test_through_an_outage_a_hold_keeps_its_full_period_and_the_relist_releases_it(
    server: FakeApiServer,
) -> None:
    holds = Reservations(ttl=60, settle=0.3)
    live = live_cache(server, reservations=holds)
    live.start()
    try:
        assert live.wait_synced(10)
        server.set_down(True)
        server.drop_watches()
        eventually(lambda: not live.pods_current())
        holds.hold(PodGpus("ml-team", "made-in-the-gap", "Pending", {GPU: Fraction(2)}))
        # Judged as at a moment well past the settle time (within the hold period): the
        # watch could not have shown the pod, so the hold stays.
        assert holds.expire(now=time.monotonic() + 3 * holds.settle) == 0
        assert holds.count == 1
        # The create went through while the watch was down and the events were compacted
        # away: the pod arrives in the relist, never as an event, and its hold is released.
        server.put("pods", stored(gpu_pod("made-in-the-gap", 2)))
        server.compact()
        server.set_down(False)
        eventually(lambda: live.pods_current() and holds.count == 0)
        assert holds.unmatched == 0
    finally:
        live.stop()


# ---- the real webhook, its facts from the API server ------------------------------------


def start(webhook_with: Any, server: FakeApiServer, tmp_path: Path, *args: str) -> Webhook:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(server.kubeconfig())
    hook: Webhook = webhook_with(
        {"gpu-quota": {"budgets": [{"name": "ml", "namespaces": ["ml-team"], "limits": {GPU: 8}}]}},
        args=("--kubeconfig", str(kubeconfig), *args),
    )
    return hook


def metric(hook: Webhook, name: str) -> float:
    text = hook.client.get(f"{hook.url}/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, name
    return float(found.group(1))


def unmatched_lines(log: Path) -> list[Any]:
    """The holds each decision-log line about unmatched holds names."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [line["holds"] for line in lines if line.get("event") == "hold-unmatched"]


def test_a_forged_review_holds_a_webhook_only_budget_for_seconds_and_is_named(
    webhook_with: Any, server: FakeApiServer, tmp_path: Path
) -> None:
    hook = start(webhook_with, server, tmp_path, "--hold-settle-seconds", "1")
    # Posted straight to the Service: looks admitted, and no create ever follows.
    _, _, forged = hook.admit(gpu_pod("ghost", 8))
    assert forged.allowed
    _, _, real = hook.admit(gpu_pod("real", 1))
    assert not real.allowed  # held: the budget looks full while the hold lasts
    assert "8 of 8" in real.message
    # Over in the settle time and the expiry timer's tick, well within the 30 s hold period
    # (the wait gives up at a third of it).
    eventually(lambda: hook.admit(gpu_pod("real", 1), dry_run=True)[2].allowed, seconds=10)
    assert metric(hook, "gpu_admission_gpu_holds_unmatched_total") == 1
    eventually(lambda: bool(unmatched_lines(tmp_path / "server0.log")))
    assert unmatched_lines(tmp_path / "server0.log") == [["ml-team/ghost"]]


def test_a_pod_the_watch_shows_ends_its_hold_matched(
    webhook_with: Any, server: FakeApiServer, tmp_path: Path
) -> None:
    hook = start(webhook_with, server, tmp_path, "--hold-settle-seconds", "2")
    mutated, _, verdict = hook.admit(gpu_pod("real", 4))
    assert verdict.allowed
    server.put("pods", stored(mutated))
    eventually(lambda: metric(hook, "gpu_admission_gpu_holds") == 0)
    # A later pod the watch never shows: once its hold has ended unmatched (settle time up),
    # the first one's would have too, had it been left to run out.
    _, _, later = hook.admit(gpu_pod("never-created", 1))
    assert later.allowed
    eventually(lambda: metric(hook, "gpu_admission_gpu_holds_unmatched_total") > 0, seconds=15)
    assert metric(hook, "gpu_admission_gpu_holds_unmatched_total") == 1


def test_two_replicas_overshoot_a_webhook_only_budget_by_at_most_one_remainder_each(
    webhook_with: Any, server: FakeApiServer, tmp_path: Path
) -> None:
    """The bound the docs state: within the watch lag each replica admits at most what is left
    of the budget as its own watch last showed it, so R replicas admit at most R x that
    remainder; once the watch shows the admitted pods, neither admits another."""
    replicas = [start(webhook_with, server, tmp_path, "--hold-settle-seconds", "30") for _ in "ab"]
    # The worst case: a burst faster than the watch, every create still on its way to the
    # store when the next review arrives.
    burst = 3 * BUDGET
    admitted: list[dict[str, Any]] = []
    for i in range(burst):
        mutated, _, verdict = replicas[i % 2].admit(gpu_pod(f"burst-{i}", 1))
        if verdict.allowed:
            admitted.append(mutated)
    assert len(admitted) <= len(replicas) * BUDGET  # the bound
    assert len(admitted) == len(replicas) * BUDGET  # and each replica's holds reach it
    # The apiserver stores what was admitted; both watches show it, every hold is matched.
    for pod in admitted:
        server.put("pods", stored(pod))
    for hook in replicas:
        eventually(lambda hook=hook: metric(hook, "gpu_admission_gpu_holds") == 0)
    for i, hook in enumerate(replicas):
        _, _, late = hook.admit(gpu_pod(f"late-{i}", 1))
        assert not late.allowed
        assert "16 of 8" in late.message
        assert metric(hook, "gpu_admission_gpu_holds_unmatched_total") == 0
