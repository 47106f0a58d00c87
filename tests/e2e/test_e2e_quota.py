"""Budgets kept by the apiserver: the exported ResourceQuota applied, the apiserver itself
refuses the over-budget GPU pod, and the webhook's explanation of the same case names the same
numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.e2e.support import (
    Installed,
    eventually,
    exported_quotas,
    gpu_pod,
    kube_json,
    post_review,
)


def test_the_exported_quota_refuses_what_the_webhook_explains_with_the_same_numbers(
    installed: Installed, namespace: str, tmp_path: Path
) -> None:
    plane = installed.plane
    budget = {"name": "e2e-team", "namespaces": [namespace], "limits": {"nvidia.com/gpu": 4}}
    quotas = exported_quotas(plane, tmp_path, [budget])
    assert len(quotas) == 1 and quotas[0]["metadata"]["namespace"] == namespace
    plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump(quotas[0]))
    name = quotas[0]["metadata"]["name"]
    # the quota controller has counted the namespace: status.used is there
    eventually(
        lambda: (
            kube_json(plane, "get", "resourcequota", name, "-n", namespace)
            .get("status", {})
            .get("used")
            is not None
        ),
        what="quota status",
    )
    # and the apiserver's quota admission knows it (its informer may trail the controller's):
    # a dry run over the budget is refused by the quota itself
    eventually(
        lambda: (
            f"exceeded quota: {name}"
            in plane.kubectl(
                "create", "--dry-run=server", "-n", namespace, "-f", "-",
                stdin=json.dumps(gpu_pod("probe", gpus=6)), check=False,
            ).stderr
        ),
        what="quota admission",
    )  # fmt: skip

    # the webhook keeps out of it: the apiserver alone refuses
    installed.set_rules(
        yaml.safe_dump(
            {
                "overrides": [
                    {
                        "name": "apiserver-alone",
                        "namespaces": [namespace],
                        "rules": {"gpu-quota": {"mode": "off"}},
                    }
                ]
            }
        )
    )
    for i in range(2):
        plane.kubectl(
            "create", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_pod(f"fits-{i}", gpus=2))
        )
    over = gpu_pod("over", gpus=2)
    refused = plane.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=json.dumps(over), check=False
    )
    assert refused.returncode != 0
    assert f"exceeded quota: {name}" in refused.stderr, refused.stderr
    numbers = re.search(
        r"requested: requests\.nvidia\.com/gpu=(\d+), used: "
        r"requests\.nvidia\.com/gpu=(\d+), limited: requests\.nvidia\.com/gpu=(\d+)",
        refused.stderr,
    )
    assert numbers, refused.stderr
    requested, used, limited = numbers.groups()
    assert (requested, used, limited) == ("2", "4", "4")

    # the webhook, judging: the same case, the same numbers, before the apiserver gets to it
    installed.set_rules("{}\n")
    eventually(
        lambda: (
            kube_json(plane, "get", "resourcequota", name, "-n", namespace)["status"]["used"].get(
                "requests.nvidia.com/gpu"
            )
            == "4"
        ),
        what="quota used 4",
    )
    answer = post_review(installed, "validate", over, namespace)
    assert not answer.allowed
    explained = answer.message
    assert (
        f"ResourceQuota {name} allows requests.nvidia.com/gpu {limited} and {used} are used; "
        f"this asks {requested}" in explained
    ), explained
    refused = plane.kubectl(
        "create", "-n", namespace, "-f", "-", stdin=json.dumps(over), check=False
    )
    assert 'admission webhook "validate.gpu-admission.io" denied' in refused.stderr
