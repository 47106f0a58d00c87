"""The objects of examples/kind, which the install docs and the e2e workflow apply to a kind
cluster: here each gets, from the same engine, rules and routing, the answer the workflow
expects from the cluster (no cluster runs here)."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.support.paths import ROOT
from tests.support.routing import selects
from webhook.cli import main

EXAMPLES = ROOT / "examples" / "kind"
RULES = ROOT / "manifests" / "base" / "rules"  # what the install's ConfigMap holds


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def _audit(name: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    main(["audit", str(EXAMPLES / name), "--rules", str(RULES), "-o", "json"])
    (result,) = json.loads(capsys.readouterr().out)["results"]
    found: dict[str, Any] = result
    return found


def _denials(result: dict[str, Any]) -> dict[str, str]:
    return {f["rule"]: f["message"] for f in result["findings"] if f["verdict"] == "deny"}


def test_the_half_gpu_raycluster_is_sent_and_denied_with_the_webhook_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    obj = _load("half-gpu-raycluster.yaml")
    assert selects(obj)
    result = _audit("half-gpu-raycluster.yaml", capsys)
    assert not result["allowed"]
    message = _denials(result)["gpu-whole-quantity"]
    assert message.startswith('gpu-whole-quantity: container "ray-head" asks 500m nvidia.com/gpu')


def test_the_stand_in_crd_is_a_valid_crd_for_that_kind() -> None:
    crd = _load("raycluster-crd.yaml")
    kubernetes_validate.validate(crd, kubernetes_validate.latest_version(), strict=True)
    obj = _load("half-gpu-raycluster.yaml")
    group, version = obj["apiVersion"].split("/")
    assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == obj["kind"]
    assert [v["name"] for v in crd["spec"]["versions"]] == [version]


def test_the_half_gpu_pod_is_judged_as_the_webhook_would(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The apiserver refuses it first (whole numbers for extended resources); were it to reach
    the webhook, the answer would be the same rule's."""
    assert selects(_load("half-gpu-pod.yaml"))
    result = _audit("half-gpu-pod.yaml", capsys)
    assert "gpu-whole-quantity" in _denials(result)


def test_the_all_gpus_pod_is_sent_and_denied(capsys: pytest.CaptureFixture[str]) -> None:
    assert selects(_load("all-gpus-pod.yaml"))
    result = _audit("all-gpus-pod.yaml", capsys)
    message = _denials(result)["visible-devices"]
    assert message.startswith('visible-devices: container "sneaky" has NVIDIA_VISIBLE_DEVICES')


def test_the_requests_only_pod_is_admitted_and_patched_as_the_workflow_checks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    obj = _load("requests-only-pod.yaml")
    assert selects(obj)
    result = _audit("requests-only-pod.yaml", capsys)
    assert result["allowed"] and result["patch"]
    patched = jsonpatch.apply_patch(obj, result["patch"])
    kubernetes_validate.validate(patched, kubernetes_validate.latest_version(), strict=True)
    spec = patched["spec"]
    # The workflow's jq checks, one for one.
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert len([t for t in spec["tolerations"] if t.get("key") == "nvidia.com/gpu"]) == 1
    memory = [v for v in spec["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"]
    assert len(memory) == 1


def test_the_plain_pod_is_never_sent() -> None:
    assert not selects(_load("plain-pod.yaml"))


def test_the_e2e_workflow_applies_these_files() -> None:
    workflow = (ROOT / ".github" / "workflows" / "e2e.yml").read_text()
    for path in sorted(EXAMPLES.glob("*.yaml")):
        assert f"examples/kind/{path.name}" in workflow, path.name
