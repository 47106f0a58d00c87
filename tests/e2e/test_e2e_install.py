"""What a platform team applies is accepted by the real apiserver as it ships: the webhook
configurations (their routing CEL compiled by the apiserver's own CEL, within its cost limits),
the exported admission policies and the exported ResourceQuotas, each read back as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.support import ROOT, Installed, contains, kube_json
from webhook.export.bundle import VALIDATING_SINCE

RESOURCE = {
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
    "ResourceQuota": "resourcequotas",
}


def stored(hook: Installed, doc: dict[str, Any]) -> dict[str, Any]:
    group = doc["apiVersion"].rpartition("/")[0]
    resource = RESOURCE[doc["kind"]] + (f".{group}" if group else "")
    where = ["-n", doc["metadata"]["namespace"]] if "namespace" in doc["metadata"] else []
    return dict(kube_json(hook.plane, "get", resource, doc["metadata"]["name"], *where))


def test_the_shipped_webhook_configurations_are_stored_as_written(installed: Installed) -> None:
    assert {c["kind"] for c in installed.webhook_configs} == {
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
    for config in installed.webhook_configs:
        differences = contains(stored(installed, config), config)
        assert not differences, differences
        # what the apiserver checked on create: each matchCondition compiled in its CEL
        for hook in config["webhooks"]:
            expected = (
                ["not-the-sharing-scheduler", "sharing-config-map"]
                if hook["name"] == "configmaps.gpu-admission.io"
                else ["not-being-deleted", "gpu-workload"]
            )
            assert [c["name"] for c in hook["matchConditions"]] == expected
    names = [h["name"] for c in installed.webhook_configs for h in c["webhooks"]]
    assert sorted(names) == [
        "configmaps.gpu-admission.io",
        "mutate.gpu-admission.io",
        "validate.gpu-admission.io",
    ]


def exported(tmp_path: Path, minor: str) -> list[dict[str, Any]]:
    rules = tmp_path / "rules"
    rules.mkdir(parents=True)
    (rules / "team.yaml").write_text(
        yaml.safe_dump(
            {
                "rules": {
                    "gpu-quota": {
                        "budgets": [
                            {
                                "name": "export-check",
                                "namespaces": ["export-check"],
                                "limits": {"nvidia.com/gpu": 4},
                            }
                        ]
                    }
                }
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "export", "--rules", str(rules), "--kubernetes", minor],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_the_exported_policies_and_quotas_are_accepted_and_stored_as_written(
    installed: Installed, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    plane = installed.plane
    minor = plane.release.minor.removeprefix("v")
    docs = exported(tmp_path / "this", minor)
    kinds = {d["kind"] for d in docs}
    if tuple(map(int, minor.split("."))) < VALIDATING_SINCE:
        # the quotas only: this apiserver refuses the policies, as it does those exported for
        # the first release that takes them
        assert kinds == {"ResourceQuota"}
        first = ".".join(map(str, VALIDATING_SINCE))
        policies = [
            d
            for d in exported(tmp_path / "first", first)
            if d["kind"] == "ValidatingAdmissionPolicy"
        ]
        refused = plane.kubectl(
            "create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(policies),
            check=False, timeout=600,
        )  # fmt: skip
        assert refused.returncode != 0 and "undeclared reference to 'lists'" in refused.stderr
    else:
        assert {
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
        } <= kinds
    assert "ResourceQuota" in kinds
    # The policies are created once per run (compiling them takes the apiserver seconds each),
    # from the shipped rules' export: this export's policies are those, stored as written.
    policies = [d for d in docs if d["kind"].endswith("Policy")]
    if policies:
        created: list[dict[str, Any]] = request.getfixturevalue("stored_policies")
        assert policies == created, "the CLI's export and the created policies differ"
    rest = [d for d in docs if not d["kind"].endswith("Policy")]
    plane.kubectl("create", "namespace", "export-check")
    try:
        plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump_all(rest), timeout=600)
        for doc in docs:
            differences = contains(stored(installed, doc), doc)
            assert not differences, (doc["kind"], doc["metadata"]["name"], differences)
    finally:
        plane.kubectl(
            "delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(rest), check=False
        )
        plane.kubectl("delete", "namespace", "export-check", "--wait=false", check=False)
