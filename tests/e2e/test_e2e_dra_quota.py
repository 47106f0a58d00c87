"""DRA device quota kept by the apiserver: the exported ResourceQuota with
`<class>.deviceclass.resource.k8s.io/devices` applied, the apiserver charges each ResourceClaim
the way the webhook's own accounting (`facts.dra.devices_of`) says it does (an exact count, the
largest `firstAvailable` alternative, `allocationMode: All` as 32), refuses the over-quota
claim, and the webhook explains the same case with the same numbers before the pod is made."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.support import Installed, eventually, exported_quotas, kube_json, post_review
from webhook.facts.dra import MAX_ALLOCATION, claim_spec, device_key, devices_of


def _claim(name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": requests}},
    }


def _charged(claim: dict[str, Any], key: str) -> int:
    """What the webhook assumes ResourceQuota charges for this claim."""
    return devices_of(claim_spec(claim["spec"]), all_as=MAX_ALLOCATION).get(key, 0)


def _dra_served(installed: Installed) -> str:
    """ "" when the apiserver serves resource.k8s.io/v1 DeviceClasses; else what it said."""
    done = installed.plane.kubectl(
        "api-resources", "--api-group=resource.k8s.io", "-o", "name", check=False
    )
    names = done.stdout.split()
    if done.returncode != 0 or "deviceclasses.resource.k8s.io" not in names:
        return f"apiserver serves no resource.k8s.io DeviceClasses: {done.stdout or done.stderr}"
    version = json.loads(installed.plane.kubectl("get", "--raw", "/apis/resource.k8s.io").stdout)
    served = [v["version"] for v in version.get("versions", [])]
    return "" if "v1" in served else f"resource.k8s.io versions served: {served}"


def test_the_apiserver_charges_dra_claims_as_the_webhook_counts_them(
    installed: Installed, namespace: str, tmp_path: Path
) -> None:
    plane = installed.plane
    why = _dra_served(installed)
    if why:
        pytest.skip(why)
    device_class = f"gpu-{namespace}.example.com"
    key = device_key(device_class)
    # A GPU class by the driver its selector requires (the rule set's gpuDeviceClasses.drivers).
    plane.kubectl(
        "create",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": device_class},
                "spec": {
                    "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]
                },
            }
        ),
    )
    try:
        _check(installed, namespace, tmp_path, device_class, key)
    finally:
        plane.kubectl("delete", "deviceclass", device_class, "--wait=false", check=False)


def _check(
    installed: Installed, namespace: str, tmp_path: Path, device_class: str, key: str
) -> None:
    plane = installed.plane
    budget = {"name": "e2e-dra", "namespaces": [namespace], "limits": {key: 4}}
    quotas = exported_quotas(plane, tmp_path, [budget])
    assert len(quotas) == 1 and quotas[0]["spec"]["hard"] == {key: "4"}, quotas
    plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump(quotas[0]))
    name = quotas[0]["metadata"]["name"]

    def used() -> str | None:
        status = kube_json(plane, "get", "resourcequota", name, "-n", namespace).get("status", {})
        value = (status.get("used") or {}).get(key)
        return str(value) if value is not None else None

    eventually(lambda: used() is not None, what=f"quota status.used of {key}")

    # the webhook keeps out of it: the apiserver alone charges and refuses
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
    exact = _claim(
        "two",
        [{"name": "gpus", "exactly": {"deviceClassName": device_class, "count": 2}}],
    )
    first = _claim(
        "pick",
        [
            {
                "name": "gpus",
                "firstAvailable": [
                    {"name": "one", "deviceClassName": device_class, "count": 1},
                    {"name": "two", "deviceClassName": device_class, "count": 2},
                ],
            }
        ],
    )
    charged = 0
    for claim in (exact, first):
        plane.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(claim))
        charged += _charged(claim, key)
        eventually(lambda n=charged: used() == str(n), what=f"quota used {charged}")  # type: ignore[misc]
    assert charged == 4  # 2, then the larger of 1 and 2

    every = _claim(
        "every",
        [{"name": "gpus", "exactly": {"deviceClassName": device_class, "allocationMode": "All"}}],
    )
    one = _claim("one", [{"name": "gpu", "exactly": {"deviceClassName": device_class}}])
    for claim in (every, one):
        refused = plane.kubectl(
            "create", "-n", namespace, "-f", "-", stdin=json.dumps(claim), check=False
        )
        assert refused.returncode != 0, claim
        assert f"exceeded quota: {name}" in refused.stderr, refused.stderr
        numbers = re.search(
            rf"requested: {re.escape(key)}=(\d+), used: {re.escape(key)}=(\d+), "
            rf"limited: {re.escape(key)}=(\d+)",
            refused.stderr,
        )
        assert numbers, refused.stderr
        assert numbers.groups() == (str(_charged(claim, key)), "4", "4"), refused.stderr

    # the webhook, judging: a pod whose claim template takes one more device is refused with
    # the apiserver's numbers, before its claim is made and refused out of sight
    installed.set_rules("{}\n")
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": one["spec"]},
    }
    plane.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(template))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dra-over"},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                    "resources": {"limits": {"memory": "8Gi"}, "claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "restartPolicy": "Never",
        },
    }
    expected = f"ResourceQuota {name} allows {key} 4 and 4 are used; this asks 1"

    def explained() -> str:
        answer = post_review(installed, "validate", pod, namespace)
        return "" if answer.allowed else answer.message

    message = eventually(lambda: expected in explained() and explained(), what="webhook denial")
    assert f"exceeded quota: {name}" in message, message
