"""The hold settle time follows the admission chain: a pod this replica admitted may be
stored only once every other validating webhook on pods has answered or timed out (up to
30 s each), so a hold lasts at least the longest such `timeoutSeconds` (plus a margin for the
write and the watch) before an unmatched one ends. Read from the cluster's
ValidatingWebhookConfigurations (live, or a snapshot's section); unknown, the settle time is
`--hold-settle-seconds`."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fake_apiserver import FakeApiServer
from tests.support.live import cluster_role_grants, eventually, live_cache
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.facts.model import PodGpus
from webhook.facts.reservations import Reservations, ReservingFacts
from webhook.facts.snapshotfile import SnapshotError, load_snapshot
from webhook.facts.webhookconfigs import KIND, SETTLE_MARGIN, pod_timeout
from webhook.ruleset.files import load_rules

GPU = "nvidia.com/gpu"


def configuration(name: str, *webhooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": list(webhooks),
    }


def webhook(
    timeout: int | None = None,
    *,
    groups: tuple[str, ...] = ("",),
    resources: tuple[str, ...] = ("pods",),
    operations: tuple[str, ...] = ("CREATE",),
    scope: str | None = None,
) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "apiGroups": list(groups),
        "apiVersions": ["v1"],
        "operations": list(operations),
        "resources": list(resources),
    }
    if scope is not None:
        rule["scope"] = scope
    hook: dict[str, Any] = {
        "name": "check.example.com",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "clientConfig": {"service": {"name": "x", "namespace": "y"}},
        "rules": [rule],
    }
    if timeout is not None:
        hook["timeoutSeconds"] = timeout
    return hook


OURS = configuration("gpu-admission", webhook(5))
SLOW = configuration("slow-policy", webhook(30))


# ---- which webhooks keep a pod create waiting ------------------------------------------


@pytest.mark.parametrize(
    ("hooks", "seconds"),
    [
        ((webhook(30),), 30),
        ((webhook(),), 10),  # timeoutSeconds defaults to 10
        ((webhook(5), webhook(12)), 12),
        ((webhook(30, groups=("*",)),), 30),
        ((webhook(30, resources=("*",)),), 30),
        ((webhook(30, resources=("*/*",)),), 30),
        ((webhook(30, operations=("*",)),), 30),
        ((webhook(30, scope="Namespaced"),), 30),
        ((webhook(30, scope="*"),), 30),
        ((webhook(30, resources=("pods/exec",)),), None),  # a subresource only
        ((webhook(30, resources=("deployments",), groups=("apps",)),), None),
        ((webhook(30, operations=("UPDATE", "DELETE")),), None),
        ((webhook(30, scope="Cluster"),), None),  # pods are namespaced
        ((webhook(30, groups=("apps",)),), None),
        ((webhook(99),), 30),  # the API caps timeoutSeconds at 30
        ((), None),
    ],
)
def test_the_webhooks_that_apply_to_pod_creates_set_the_wait(
    hooks: tuple[dict[str, Any], ...], seconds: int | None
) -> None:
    assert pod_timeout(configuration("c", *hooks)) == seconds


def test_a_configuration_in_an_odd_shape_counts_as_the_longest_wait() -> None:
    """Stored configurations are valid; anything else is read as the worst case."""
    assert pod_timeout({"webhooks": [{"rules": "pods"}]}) == 30
    assert pod_timeout({"webhooks": "x"}) == 30
    assert pod_timeout({"metadata": {"name": "empty"}}) is None


# ---- the holds follow it ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("chain", "held_at", "still_held_at", "ends_at"),
    [
        # The other webhook may still be deciding until its timeout (plus the margin).
        pytest.param(30.0, 100.0, 100.0 + 29.9, 100.0 + 30 + SETTLE_MARGIN, id="slowest-webhook"),
        # The flag is the least settle time: a short chain never shortens it.
        pytest.param(2.0, 0.0, 9.9, 10.0, id="short-chain-keeps-the-flag"),
        # The configurations cannot be read: the settle time is the flag.
        pytest.param(None, 0.0, 9.9, 10.0, id="unknown-chain-is-the-flag"),
    ],
)
def test_an_unmatched_hold_ends_at_the_settle_time_the_chain_gives(
    chain: float | None, held_at: float, still_held_at: float, ends_at: float
) -> None:
    r = Reservations(ttl=30, settle=10)
    r.watching = lambda: True
    r.chain = lambda: chain
    r.hold(PodGpus("ml", "p", "Pending", {GPU: 1}), now=held_at)
    assert r.expire(now=still_held_at) == 0
    assert r.expire(now=ends_at) == 1
    assert r.unmatched == 1


def test_a_chain_longer_than_the_hold_period_lengthens_the_hold() -> None:
    """A hold that ended while the chain could still store its pod would let the next burst
    past the budget: the hold period is never shorter than the settle time."""
    r = Reservations(ttl=30, settle=10)
    r.chain = lambda: 30.0  # no watch at all: only the period ends a hold
    r.hold(PodGpus("ml", "p", "Pending", {GPU: 1}), now=0.0)
    assert r.expire(now=30.0) == 0
    assert r.expire(now=30.0 + SETTLE_MARGIN) == 1


# ---- the attack: a slow webhook beside ours, bursts 10 s apart --------------------------

BUDGET = {
    "rules": {
        "gpu-quota": {"budgets": [{"name": "ml", "namespaces": ["ml-team"], "limits": {GPU: 8}}]}
    }
}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    srv = FakeApiServer()
    srv.start()
    srv.put("namespaces", {"metadata": {"name": "ml-team"}})
    yield srv
    srv.stop()


def gpu_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml-team"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: "1"}}}]},
    }


def bursts(tmp_path: Path, source: ReservingFacts, start: float) -> int:
    """Three bursts of 8 one-GPU pods, 10 s apart, none of them stored yet (the slow webhook
    keeps each create waiting up to 30 s): how many the webhook admits."""
    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "rules" / "budget.yaml").write_text(yaml.safe_dump(BUDGET))
    compiled = compile_rules(load_rules(tmp_path / "rules"))
    admitted = 0
    for burst in range(3):
        now = start + 10.0 * burst
        source.reservations.expire(now=now)
        for i in range(8):
            obj = gpu_pod(f"b{burst}-{i}")
            subject = subject_for(obj, namespace="ml-team")
            decision = evaluate(
                subject, compiled, source.facts_for("ml-team"), stage=Stage.VALIDATE
            )
            if decision.hold is not None:
                source.reservations.hold(decision.hold, now=now)
                admitted += 1
    return admitted


def test_bursts_ten_seconds_apart_beside_a_slow_webhook_stay_within_the_budget(
    server: FakeApiServer, tmp_path: Path
) -> None:
    server.put("validatingwebhookconfigurations", OURS)
    server.put("validatingwebhookconfigurations", SLOW)
    holds = Reservations(ttl=30, settle=10)  # serve's defaults
    live = live_cache(server, reservations=holds)
    live.start()
    try:
        assert live.wait_synced(10)
        eventually(lambda: live.webhook_seconds() == 30)
        start = time.monotonic() + 1000  # fake time ahead: no real expiry interferes
        assert bursts(tmp_path, ReservingFacts(live, holds), start) == 8
    finally:
        live.stop()


def test_the_settle_time_follows_a_webhook_configuration_as_it_changes(
    server: FakeApiServer,
) -> None:
    live = live_cache(server)
    live.start()
    try:
        assert live.wait_synced(10)
        eventually(lambda: live.webhook_seconds() == 0)  # listed: nothing on pods
        server.put("validatingwebhookconfigurations", SLOW)
        eventually(lambda: live.webhook_seconds() == 30)
        server.delete("validatingwebhookconfigurations", "", "slow-policy")
        eventually(lambda: live.webhook_seconds() == 0)
    finally:
        live.stop()


def test_without_leave_to_read_them_the_flag_holds_and_a_warning_says_so(
    server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.forbidden.add("validatingwebhookconfigurations")
    live = live_cache(server)
    with caplog.at_level(logging.WARNING, logger="gpu-admission.cache"):
        live.start()
        try:
            assert live.wait_synced(10)
            eventually(lambda: "--hold-settle-seconds" in caplog.text)
            assert live.webhook_seconds() is None
        finally:
            live.stop()


# ---- a snapshot says it too -------------------------------------------------------------


def snapshot(tmp_path: Path, configurations: Any) -> Path:
    doc = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "validatingWebhookConfigurations": configurations,
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_snapshot_lists_the_webhook_configurations(tmp_path: Path) -> None:
    facts = load_snapshot(snapshot(tmp_path, [OURS, SLOW]))
    assert facts.webhook_seconds() == 30
    holds = Reservations(ttl=30, settle=10)
    ReservingFacts(facts, holds)
    assert holds.chain is not None and holds.chain() == 30


def test_a_snapshot_without_the_section_does_not_know(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        yaml.safe_dump({"apiVersion": "gpu-admission.io/v1", "kind": "ClusterSnapshot"})
    )
    assert load_snapshot(path).webhook_seconds() is None


def test_a_snapshot_configuration_without_a_name_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match=r"validatingWebhookConfigurations\[0\]"):
        load_snapshot(snapshot(tmp_path, [{"webhooks": []}]))


def test_the_cluster_role_grants_reading_the_webhook_configurations() -> None:
    granted = cluster_role_grants()
    assert {"list", "watch"} <= granted[("admissionregistration.k8s.io", KIND)]
