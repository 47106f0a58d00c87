"""The review handlers in-process (pytest-asyncio): the same app the server runs, without TLS.

Breadth lives in the engine tests and the goldens; these check what only the HTTP layer does:
readiness before a rule set is loaded, the hold it takes after an admitted pod, reloads
between requests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.support.paths import ROOT, SNAPSHOT
from tests.support.reviews import review_for
from tests.support.webhook import serving
from webhook.facts.reservations import Reservations, ReservingFacts
from webhook.facts.snapshotfile import load_snapshot
from webhook.facts.sources import ClusterSource
from webhook.server.app import make_app
from webhook.server.reload import RuleHolder

BUDGET = {
    "rules": {
        "gpu-quota": {
            "budgets": [
                {"name": "ml", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 16}},
                # research has no ResourceQuota: this budget is the webhook's alone
                {"name": "research", "namespaces": ["research"], "limits": {"nvidia.com/gpu": 4}},
            ]
        }
    }
}


def gpu_pod(gpus: int, name: str = "train", namespace: str = "ml-team") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus), "memory": "32Gi"}},
                }
            ]
        },
    }


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text(yaml.safe_dump(BUDGET))
    return folder


@pytest.fixture
async def client(
    rules_dir: Path,
) -> AsyncIterator[tuple[aiohttp.ClientSession, ClusterSource, RuleHolder]]:
    holder = RuleHolder(source=rules_dir)
    holder.refresh()
    reservations = Reservations(ttl=30)
    source = ClusterSource(ReservingFacts(load_snapshot(SNAPSHOT), reservations), reservations)
    async with serving(make_app(holder, source)) as c:
        yield c, source, holder


async def validate(c: aiohttp.ClientSession, obj: Any, **kw: Any) -> dict[str, Any]:
    review = review_for(obj, **kw)
    resp = await c.post("/validate?timeout=10s", json=review)
    assert resp.status == 200
    body: dict[str, Any] = (await resp.json())["response"]
    assert body["uid"] == review["request"]["uid"]
    return body


async def test_an_admitted_gpu_pod_holds_its_gpus_for_the_next_review(
    client: tuple[aiohttp.ClientSession, ClusterSource, RuleHolder],
) -> None:
    c, source, _ = client
    first = gpu_pod(4, "first", "research")
    assert (await validate(c, first, namespace="research"))["allowed"]  # 0 of 4 in use
    assert source.reservations is not None and len(source.reservations.held("research")) == 1
    second = await validate(c, gpu_pod(1, "second", "research"), namespace="research")
    assert not second["allowed"]
    assert "uses 4 of 4 nvidia.com/gpu" in second["status"]["message"]


async def test_a_hold_counts_nothing_where_a_resource_quota_caps_the_resource(
    client: tuple[aiohttp.ClientSession, ClusterSource, RuleHolder],
) -> None:
    """ml-team's ResourceQuota caps nvidia.com/gpu (12 of 16 used): the apiserver keeps that
    count exactly, so an admitted pod that may never come (a forged review) holds nothing."""
    c, source, _ = client
    assert (await validate(c, gpu_pod(4, "first")))["allowed"]
    assert source.reservations is not None and len(source.reservations.held("ml-team")) == 1
    assert (await validate(c, gpu_pod(1, "second")))["allowed"]


async def test_a_dry_run_holds_nothing(
    client: tuple[aiohttp.ClientSession, ClusterSource, RuleHolder],
) -> None:
    c, source, _ = client
    assert (await validate(c, gpu_pod(4), dry_run=True))["allowed"]
    assert source.reservations is not None and source.reservations.held("ml-team") == []
    assert (await validate(c, gpu_pod(4)))["allowed"]


async def test_a_denied_pod_holds_nothing(
    client: tuple[aiohttp.ClientSession, ClusterSource, RuleHolder],
) -> None:
    c, source, _ = client
    assert not (await validate(c, gpu_pod(5)))["allowed"]
    assert source.reservations is not None and source.reservations.held("ml-team") == []


async def test_a_reload_takes_effect_on_the_next_request(
    client: tuple[aiohttp.ClientSession, ClusterSource, RuleHolder], rules_dir: Path
) -> None:
    c, _, holder = client
    assert not (await validate(c, gpu_pod(5)))["allowed"]
    (rules_dir / "rules.yaml").write_text(
        yaml.safe_dump({"rules": {"gpu-quota": {"mode": "warn"}}})
    )
    assert holder.refresh()
    answer = await validate(c, gpu_pod(5))
    assert answer["allowed"]


async def test_no_rule_set_yet_means_unavailable_not_allowed(tmp_path: Path) -> None:
    holder = RuleHolder(source=tmp_path / "missing")
    holder.refresh()
    async with serving(make_app(holder)) as c:
        resp = await c.post("/validate", json=review_for(gpu_pod(1)))
        assert resp.status == 503
        assert (await c.get("/readyz")).status == 503
        assert (await c.get("/healthz")).status == 200


def test_the_shipped_rules_load_in_the_holder() -> None:
    holder = RuleHolder(source=ROOT / "rules")
    assert holder.refresh() and holder.current is not None
