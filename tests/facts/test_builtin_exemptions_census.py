"""Built-in exempt namespaces that exist without their component: named by `rules check
--cluster-snapshot` and by the webhook's start-up log (a tenant may have created them)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.fake_apiserver import FakeApiServer
from tests.support.live import live_cache
from webhook.cli import main
from webhook.engine.compiled import compile_rules
from webhook.ruleset.models import RuleSet
from webhook.server.components import census_of, unattended_namespaces
from webhook.server.reload import RuleHolder


def _snapshot(tmp_path: Path, pods: list[dict[str, Any]]) -> Path:
    doc = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "namespaces": {"kai-scale-adjust": {}, "gpu-operator": {}, "ml-team": {}},
        "pods": pods,
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_rules_check_names_a_built_in_namespace_without_its_component(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [
        {
            "namespace": "gpu-operator",
            "name": "nvidia-device-plugin-x",
            "serviceAccount": "nvidia-device-plugin",
        },
        {"namespace": "kai-scale-adjust", "name": "escape", "serviceAccount": "default"},
    ]
    assert main(["rules", "check", "--cluster-snapshot", str(_snapshot(tmp_path, pods))]) == 0
    out = capsys.readouterr().out
    assert "warning: built-in exempt namespace kai-scale-adjust exists but runs no pod" in out
    assert "gpu-operator exists" not in out


def test_rules_check_says_nothing_when_the_snapshot_does_not_say_who_runs_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = [{"namespace": "ml-team", "name": "train", "gpus": {"nvidia.com/gpu": 1}}]
    assert main(["rules", "check", "--cluster-snapshot", str(_snapshot(tmp_path, pods))]) == 0
    assert "built-in exempt namespace" not in capsys.readouterr().out


def test_the_start_up_log_names_them_from_the_live_cache(
    server: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.load(
        "namespaces", [{"metadata": {"name": n}} for n in ("gpu-operator", "kai-scale-adjust")]
    )
    plugin = {
        "metadata": {"name": "nvidia-device-plugin-x", "namespace": "gpu-operator"},
        "spec": {"serviceAccountName": "nvidia-device-plugin", "containers": []},
    }
    server.load("pods", [plugin])
    live = live_cache(server)
    live.list_once()
    census = census_of(live, ["gpu-operator", "kai-scale-adjust", "runai-reservation"])
    assert census.namespaces == {"gpu-operator", "kai-scale-adjust"}
    assert census.pods["gpu-operator"] == (("nvidia-device-plugin", "nvidia-device-plugin-x"),)
    holder = RuleHolder(source=None, current=compile_rules(RuleSet()))
    with caplog.at_level(logging.WARNING, logger="gpu-admission"):
        asyncio.run(unattended_namespaces(holder, live)())
    named = [
        r.getMessage() for r in caplog.records if "built-in exempt namespace" in r.getMessage()
    ]
    assert len(named) == 1 and named[0].startswith("built-in exempt namespace kai-scale-adjust")
