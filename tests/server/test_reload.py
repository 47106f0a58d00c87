"""Rule edits reach the running webhook without a restart, and a broken edit never hurts it."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.reviews import review_for
from tests.support.webhook import Webhook, start_webhook, stop_webhook
from webhook.ruleset.models import RuleSet

# Every setting spelled out, as a complete rule file would.
DEFAULTS = RuleSet().model_dump(by_alias=True, mode="json", exclude_none=True)
POLL = "0.1"


def rules_text(**modes: str) -> str:
    doc = json.loads(json.dumps(DEFAULTS))
    for rule, mode in modes.items():
        doc["rules"][rule]["mode"] = mode
    return yaml.safe_dump(doc)


# Two complete rule sets that differ in two rules at once: a response that mixes them would
# prove a request saw half of one set and half of the other.
SET_A = rules_text(**{"visible-devices": "enforce", "gpu-memory-limit": "warn"})
SET_B = rules_text(**{"visible-devices": "warn", "gpu-memory-limit": "off"})
BROKEN = rules_text(**{"visible-devices": "enforse"})  # a typo in a mode

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "llm"},
    "spec": {
        "containers": [
            {
                "name": "llm",
                "image": "vllm",
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                "readinessProbe": {"tcpSocket": {"port": 80}},
                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
            }
        ]
    },
}


def signature(hook: Webhook) -> str:
    answer = hook.validate(POD)
    if not answer.allowed and answer.warned_rules == {"gpu-memory-limit"}:
        return "A"
    if answer.allowed and answer.warned_rules == {"visible-devices"}:
        return "B"
    return f"mixed: allowed={answer.allowed} warned={answer.warned_rules}"


def wait_for(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


@pytest.fixture
def rule_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text(SET_A)
    return folder


@pytest.fixture
def hook(certs: Path, rule_dir: Path, tmp_path: Path) -> Iterator[Webhook]:
    started = start_webhook(certs, rule_dir, tmp_path / "server.log", "--rules-check-seconds", POLL)
    yield started
    stop_webhook(started)


def test_an_edit_takes_effect_without_a_restart(hook: Webhook, rule_dir: Path) -> None:
    assert signature(hook) == "A"
    (rule_dir / "rules.yaml").write_text(SET_B)
    wait_for(lambda: signature(hook) == "B")


def test_a_broken_edit_is_refused_and_the_last_good_set_keeps_serving(
    hook: Webhook, rule_dir: Path, tmp_path: Path
) -> None:
    (rule_dir / "rules.yaml").write_text(BROKEN)
    log = tmp_path / "server.log"
    wait_for(lambda: "refused (the previous rule set keeps serving)" in log.read_text())
    assert "rules.visible-devices.mode" in log.read_text()
    assert signature(hook) == "A"
    assert hook.client.get(f"{hook.url}/readyz").status_code == 200
    (rule_dir / "rules.yaml").write_text(SET_B)
    wait_for(lambda: signature(hook) == "B")


def test_a_configmap_symlink_swap_is_picked_up(certs: Path, tmp_path: Path) -> None:
    """kubelet updates a ConfigMap volume by pointing `..data` at a new timestamped folder."""
    mount = tmp_path / "mount"
    (mount / "..2026_01_01").mkdir(parents=True)
    (mount / "..2026_01_01" / "rules.yaml").write_text(SET_A)
    (mount / "..data").symlink_to("..2026_01_01")
    (mount / "rules.yaml").symlink_to("..data/rules.yaml")
    started = start_webhook(certs, mount, tmp_path / "s.log", "--rules-check-seconds", POLL)
    try:
        assert signature(started) == "A"
        (mount / "..2026_01_02").mkdir()
        (mount / "..2026_01_02" / "rules.yaml").write_text(SET_B)
        (mount / "..data_tmp").symlink_to("..2026_01_02")
        os.replace(mount / "..data_tmp", mount / "..data")
        wait_for(lambda: signature(started) == "B")
    finally:
        stop_webhook(started)


def test_broken_rules_at_start_mean_not_ready_until_fixed(
    certs: Path, rule_dir: Path, tmp_path: Path
) -> None:
    (rule_dir / "rules.yaml").write_text(BROKEN)
    started = start_webhook(
        certs, rule_dir, tmp_path / "s.log", "--rules-check-seconds", POLL, wait_ready=False
    )
    try:
        assert started.client.get(f"{started.url}/readyz").status_code == 503
        resp = started.post("mutate", json.dumps(review_for(POD)).encode())
        assert resp.status_code == 503
        (rule_dir / "rules.yaml").write_text(SET_A)
        wait_for(lambda: started.client.get(f"{started.url}/readyz").status_code == 200)
        assert signature(started) == "A"
    finally:
        stop_webhook(started)


def test_reload_under_load_loses_no_request(hook: Webhook, rule_dir: Path) -> None:
    seen: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def client() -> None:
        try:
            while not stop.is_set() and len(seen) < 20_000:
                seen.append(signature(hook))
        except BaseException as exc:  # reported below: any failed request fails the test
            errors.append(exc)

    worker = threading.Thread(target=client)
    worker.start()
    try:
        for i in range(30):  # valid and invalid edits alternately, not atomically written
            (rule_dir / "rules.yaml").write_text(SET_B if i % 3 == 0 else BROKEN)
            time.sleep(0.12)
            (rule_dir / "rules.yaml").write_text(SET_A if i % 2 else SET_B)
            time.sleep(0.12)
        (rule_dir / "rules.yaml").write_text(SET_B)
        wait_for(lambda: seen[-1:] == ["B"])
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not errors
    assert len(seen) > 100
    assert set(seen) == {"A", "B"}
    # the last file wins: a poll that read an earlier edit may still be installing it when the
    # client first sees B, and the next poll puts B back
    wait_for(lambda: signature(hook) == "B")
    assert all(signature(hook) == "B" for _ in range(20))


def test_the_log_names_the_built_in_defaults_when_no_folder_is_given(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    import logging

    from webhook.server.reload import RuleHolder

    (tmp_path / "team.yaml").write_text("mode: audit\n")
    with caplog.at_level(logging.INFO, logger="gpu-admission"):
        RuleHolder(source=None).refresh()
        RuleHolder(source=tmp_path).refresh()
    lines = [r.getMessage() for r in caplog.records if "rule set loaded" in r.getMessage()]
    assert lines[0] == "rule set loaded: the built-in defaults (no rules folder given)"
    assert lines[1].startswith(f"rule set loaded from {tmp_path} (")
    assert not any("None" in line for line in lines)
