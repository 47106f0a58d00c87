"""Work the server does beside reviews: rule reloads off the event loop, GPU-hold expiry.

In-process (pytest-asyncio): the rule loader is made to block until the test lets it go, so
the test proves `/healthz` was answered while a load was still running, without timing it.
"""

from __future__ import annotations

import asyncio
import threading
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT, SNAPSHOT
from tests.support.webhook import serving
from webhook.engine.compiled import CompiledRuleSet
from webhook.facts.model import PodGpus
from webhook.facts.reservations import Reservations
from webhook.facts.sources import cluster_source
from webhook.server import reload
from webhook.server.app import hold_expirer, make_app, rule_watcher
from webhook.server.reload import RuleHolder

PATIENCE = 5.0  # far above anything the server needs; reached only when a test fails


async def wait_until(check: Any) -> None:
    deadline = asyncio.get_running_loop().time() + PATIENCE
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text((ROOT / "rules" / "gpu-admission.yaml").read_text())
    return folder


async def test_a_slow_rule_load_does_not_block_healthz_and_the_swap_is_on_the_loop(
    rules_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = RuleHolder(source=rules_dir)
    assert holder.refresh()
    first = holder.current
    loading, release = threading.Event(), threading.Event()
    released: list[bool] = []
    real_load = reload.load_rules

    def slow_load(folder: Path) -> Any:
        loading.set()
        released.append(release.wait(PATIENCE))  # False: nobody released it, /healthz hung
        return real_load(folder)

    installed_on: list[int] = []
    real_install = holder.install

    def install(rules: CompiledRuleSet) -> None:
        installed_on.append(threading.get_ident())
        real_install(rules)

    monkeypatch.setattr(reload, "load_rules", slow_load)
    monkeypatch.setattr(holder, "install", install)
    app = make_app(holder)
    app.contexts.append(rule_watcher(holder, 0.01))
    async with serving(app) as client:
        doc = {"rules": {"gpu-memory-limit": {"mode": "off"}}}
        (rules_dir / "rules.yaml").write_text(yaml.safe_dump(doc))
        await wait_until(loading.is_set)
        assert (await client.get("/healthz")).status == 200  # while the load is blocked
        assert holder.current is first  # nothing half-loaded went into service
        release.set()
        await wait_until(lambda: holder.current is not first)
    assert released == [True]
    assert installed_on == [threading.get_ident()]  # the swap: on the event loop's thread


async def test_a_refused_reload_in_the_thread_keeps_the_old_set(
    rules_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    holder = RuleHolder(source=rules_dir)
    assert holder.refresh()
    first = holder.current
    (rules_dir / "rules.yaml").write_text("rules:\n  visible-devices:\n    mode: enforse\n")
    with caplog.at_level("ERROR", logger="gpu-admission"):
        assert await asyncio.to_thread(holder.prepare) is None
    assert holder.current is first
    # The log says what `rules check` says: where, what, and how to fix it.
    assert (
        f"{rules_dir}/rules.yaml:3:11: rules.visible-devices.mode: 'enforse' is not one of: "
        "enforce, warn, audit, off. Fix: write enforce (one of: enforce, warn, audit, off)"
    ) in caplog.text
    assert await asyncio.to_thread(holder.prepare) is None  # reported once, not on every poll


def test_hold_seconds_is_the_reservations_ttl() -> None:
    for seconds in (0.0, 7.5):
        source = cluster_source(snapshot=SNAPSHOT, hold_seconds=seconds)
        assert source.reservations is not None and source.reservations.ttl == seconds
    assert cluster_source().reservations is None  # no facts, nothing to hold against


async def test_expired_holds_are_dropped_on_a_timer() -> None:
    # Nothing reads this namespace's facts: only the timer can drop its hold.
    holds = Reservations(ttl=0.05)
    holds.hold(PodGpus("ml", "train-0", "Pending", {"nvidia.com/gpu": Fraction(1)}))
    assert holds.count == 1
    app = make_app(RuleHolder(source=ROOT / "rules"))
    app.contexts.append(hold_expirer(holds, every=0.01))
    async with serving(app):
        await wait_until(lambda: holds.count == 0)
