"""Budgets the apiserver can keep become ResourceQuotas: transactional across every webhook
replica and unforgeable. What it cannot count stays the webhook's, and every front door
(export, `rules check`, `rules explain`) says which is which, and why."""

from __future__ import annotations

import io
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from webhook.cli import main
from webhook.engine.compiled import compile_rules
from webhook.export.bundle import build
from webhook.export.companion import webhook_only_settings
from webhook.export.render import render
from webhook.rulecli.commands import check, explain
from webhook.ruleset.files import load_rules
from webhook.ruleset.quotas import quota_name

BUDGETS = """\
rules:
  gpu-quota:
    budgets:
      - name: ML Team
        namespaces: [ml-team]
        limits:
          nvidia.com/gpu: 8
          amd.com/gpu: 2
          gpu.nvidia.com.deviceclass.resource.k8s.io/devices: 4
          nvidia.com/gpumem: 40000
        products:
          NVIDIA-H100-80GB-HBM3: {nvidia.com/gpu: 4}
      - name: research
        namespaces: [research-a, research-b]
        limits: {nvidia.com/gpu: 16}
      - name: by-label
        namespaceSelector: {matchLabels: {tier: gpu}}
        limits: {nvidia.com/gpu: 4}
"""


def _folder(tmp_path: Path, text: str = BUDGETS) -> Path:
    (tmp_path / "budgets.yaml").write_text(text)
    return tmp_path


def _quotas(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d and d["kind"] == "ResourceQuota"]


def test_a_one_namespace_budget_becomes_a_resource_quota_of_requests(tmp_path: Path) -> None:
    result = build(compile_rules(load_rules(_folder(tmp_path))))
    (quota,) = _quotas(render(result, "1.36", "test"))
    assert quota["metadata"]["name"] == quota_name("ML Team")
    assert quota["metadata"]["name"].startswith("gpu-admission-ml-team-")
    assert quota["metadata"]["namespace"] == "ml-team"
    assert quota["metadata"]["labels"]["app.kubernetes.io/name"] == "gpu-admission"
    assert quota["metadata"]["annotations"] == {
        "gpu-admission.io/budget": "ML Team",
        "gpu-admission.io/from": "rules.gpu-quota.budgets[ML Team]",
    }
    # Extended resources count only under requests. (a limits. quota is never enforced); DRA
    # devices per DeviceClass; HAMi's per-GPU units and per-product caps are not expressible.
    assert quota["spec"]["hard"] == {
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "4",
        "requests.amd.com/gpu": "2",
        "requests.nvidia.com/gpu": "8",
    }
    left = {item.why for item in result.left_out if item.part == "quota"}
    assert any("nvidia.com/gpumem=40000: a per-GPU unit" in why for why in left)
    assert any("NVIDIA-H100-80GB-HBM3: nvidia.com/gpu=4: a per-product cap" in w for w in left)
    assert any("'research': nvidia.com/gpu=16: it spans several namespaces" in w for w in left)
    assert any("'by-label': nvidia.com/gpu=4: it spans several namespaces" in w for w in left)


@pytest.mark.parametrize("version", ["1.34", kubernetes_validate.utils.latest_version()])
def test_the_quotas_are_valid_objects(tmp_path: Path, version: str) -> None:
    text = render(build(compile_rules(load_rules(_folder(tmp_path)))), "1.36", "test")
    for quota in _quotas(text):
        kubernetes_validate.validate(quota, version, strict=True)


def test_the_same_rules_give_the_same_bytes(tmp_path: Path) -> None:
    rules = compile_rules(load_rules(_folder(tmp_path)))
    assert render(build(rules), "1.36", "x") == render(build(rules), "1.36", "x")


def test_no_budget_no_quota() -> None:
    assert _quotas(render(build(compile_rules(load_rules(None))), "1.36", "test")) == []


def test_rules_check_says_how_each_budget_is_kept(tmp_path: Path) -> None:
    out = io.StringIO()
    assert check(_folder(tmp_path), out) == 0
    text = out.getvalue()
    assert (
        "note: budget 'ML Team': gpu.nvidia.com.deviceclass.resource.k8s.io/devices=4, "
        "requests.amd.com/gpu=2, requests.nvidia.com/gpu=8 enforced by the apiserver "
        f"(ResourceQuota {quota_name('ML Team')} in ml-team" in text
    )
    assert "budget 'research': nvidia.com/gpu=16 enforced by the webhook only (it spans" in text


def test_rules_explain_says_it_for_the_namespace_s_budgets(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    out = io.StringIO()
    explain(folder, "research-a", None, out)
    assert "budget 'research': nvidia.com/gpu=16 enforced by the webhook only" in out.getvalue()
    assert "budget 'ML Team'" not in out.getvalue()
    out = io.StringIO()
    explain(folder, "ml-team", None, out)
    assert f"(ResourceQuota {quota_name('ML Team')} in ml-team" in out.getvalue()


def test_the_webhook_keeps_judging_budgets_the_apiserver_enforces(tmp_path: Path) -> None:
    """The reduced webhook (export --webhook-only) still explains a budget early, with its
    own message; the ResourceQuota is what holds the line."""
    settings = webhook_only_settings(build(compile_rules(load_rules(_folder(tmp_path)))))
    assert "gpu-quota" not in settings["rules"]


def test_budget_names_that_read_alike_get_quotas_of_their_own() -> None:
    names = {quota_name(n) for n in ("ml-team GPUs", "ML_team_gpus", "ml team gpus")}
    assert len(names) == 3
    assert all(len(n) <= 63 and n == n.lower() for n in names)


def test_rules_check_with_a_snapshot_reports_budgets_and_quotas_that_disagree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rules").mkdir()
    rules = _folder(tmp_path / "rules")
    snapshot = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "namespaces": {"ml-team": {"labels": {}}},
        "resourceQuotas": [
            # the generated quota, applied and in step for AMD; an older one, looser for NVIDIA
            {"namespace": "ml-team", "name": quota_name("ML Team"),
             "hard": {"requests.amd.com/gpu": "2", "requests.nvidia.com/gpu": "8"}},
            {"namespace": "ml-team", "name": "legacy", "hard": {"requests.nvidia.com/gpu": "16"}},
        ],
    }  # fmt: skip
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump(snapshot))
    assert main(["rules", "check", str(rules), "--cluster-snapshot", str(path)]) == 0
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: budget 'ML Team': no ResourceQuota in ml-team caps "
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices yet; apply ResourceQuota "
        f"{quota_name('ML Team')} (`gpu-admission export`) so the apiserver keeps it across "
        "replicas",
        "warning: budget 'ML Team' allows requests.nvidia.com/gpu=8 in ml-team, ResourceQuota "
        "legacy allows 16: the budget's 8 is what holds and what the webhook explains; make "
        "them agree (change the budget, or re-export and apply the quota)",
    ]


def test_rules_check_refuses_a_snapshot_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rules").mkdir()
    path = tmp_path / "snapshot.yaml"
    path.write_text("kind: [")
    rules = str(_folder(tmp_path / "rules"))
    assert main(["rules", "check", rules, "--cluster-snapshot", str(path)]) == 2
    assert "snapshot.yaml" in capsys.readouterr().err
