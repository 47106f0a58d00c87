"""`gpu-admission snapshot` writes what the live audit reads: an audit of the stored objects
against the snapshot file finds what `audit --cluster` finds on the real apiserver, message for
message, and the webhook's own account (which may not read Secrets) can take it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.support import ROOT, Installed, deployment, eventually, kube_json, node

PRODUCT = "nvidia.com/gpu.product"


@pytest.fixture(scope="module")
def gpu_node(installed: Installed) -> Iterator[str]:
    """One kwok GPU node, so the deployments' pods run and hold GPUs the facts count."""
    plane, name = installed.plane, "snapshot-h100"
    h100 = node(name, {PRODUCT: "NVIDIA-H100-80GB-HBM3"}, [], {"nvidia.com/gpu": "8"})
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(h100))
    yield name
    plane.kubectl("delete", "node", name, "--wait=false", check=False)


def gpu_admission(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=300,
    )


def findings(report: dict[str, Any]) -> dict[tuple[str, str], set[tuple[str, str, str]]]:
    assert report["errors"] == [] and report["notChecked"] == [], report
    return {
        (r["kind"], r["name"]): {
            (f["rule"], f["verdict"], f.get("message", "")) for f in r["findings"]
        }
        for r in report["results"]
    }


def test_an_audit_against_the_snapshot_agrees_with_the_live_audit(
    installed: Installed, namespace: str, tmp_path: Path, gpu_node: str
) -> None:
    plane = installed.plane
    plane.kubectl("create", "quota", "gpus", "-n", namespace, "--hard=requests.nvidia.com/gpu=2")
    plane.kubectl(
        "create", "secret", "generic", "devices", "-n", namespace,
        "--from-literal=NVIDIA_VISIBLE_DEVICES=never-read-0451",
    )  # fmt: skip
    plane.kubectl(
        "create", "configmap", "devices", "-n", namespace,
        "--from-literal=NVIDIA_VISIBLE_DEVICES=all",
    )  # fmt: skip
    from_config_map = deployment("env-config-map", 1, 1)
    from_config_map["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": "devices"}}
    ]
    objects = [
        deployment("within", 1, 1),
        deployment("beyond", 2, 3),
        deployment("no-class", 1, 1, priorityClassName="no-such-class"),
        from_config_map,
    ]
    off = {"mode": "off"}
    installed.set_rules(
        json.dumps(
            {
                "overrides": [
                    {
                        "name": "look-away",
                        "namespaces": [namespace],
                        "rules": {
                            "gpu-priority-class": off,
                            "gpu-quota": off,
                            "visible-devices": off,
                        },
                    }
                ]
            }
        )
    )
    for obj in objects:
        plane.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(obj))
    installed.set_rules("{}\n")
    # within and env-config-map take the budget's 2 GPUs (or one of beyond's 2-GPU pods does);
    # no-class never makes a pod: the apiserver refuses its missing PriorityClass
    eventually(
        lambda: kube_json(plane, "get", "resourcequota", "gpus", "-n", namespace)
        .get("status", {}).get("used", {}).get("requests.nvidia.com/gpu") == "2",
        what="the quota's 2 GPUs in use",
    )  # fmt: skip
    rules = ("--rules", str(installed.rules))
    kubeconfig = ("--kubeconfig", str(plane.kubeconfig))
    snapshot = tmp_path / "cluster.yaml"

    def gpu_pods() -> list[dict[str, Any]]:
        pods = yaml.safe_load(snapshot.read_text())["pods"]
        return [p for p in pods if p["namespace"] == namespace and p.get("gpus")]

    def steady() -> bool:
        """Two snapshots in a row the same, every GPU pod running: the pods have settled."""
        first = gpu_admission("snapshot", *kubeconfig)
        second = gpu_admission("snapshot", *kubeconfig, "--out", str(snapshot))
        assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
        pods = gpu_pods()
        return (
            first.stdout == snapshot.read_text()
            and bool(pods)
            and all(p["phase"] == "Running" for p in pods)
        )

    eventually(steady, seconds=90, what="two snapshots alike, the GPU pods running")
    running = gpu_pods()
    assert sum(int(n) for p in running for n in p["gpus"].values()) == 2, running
    assert all(p["node"] == gpu_node for p in running), running
    live = gpu_admission(
        "audit", "--cluster", *kubeconfig, *rules, "--namespace", namespace, "-o", "json"
    )
    assert live.returncode in (0, 1), live.stderr

    stored = []
    for obj in objects:
        name = obj["metadata"]["name"]
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(kube_json(plane, "get", "deployment", name, "-n", namespace)))
        stored.append(str(path))
    offline = gpu_admission(
        "audit", "--cluster-snapshot", str(snapshot), *rules, "-o", "json", *stored
    )
    assert offline.returncode == live.returncode, offline.stderr

    assert findings(json.loads(offline.stdout)) == findings(json.loads(live.stdout))
    decided = {f[:2] for found in findings(json.loads(live.stdout)).values() for f in found}
    # the cluster facts decided something: the quota, the missing class, the ConfigMap's value
    for rule in ("gpu-quota", "gpu-priority-class", "visible-devices"):
        assert any(r == rule and v in ("deny", "warn") for r, v in decided), (rule, decided)
    text = snapshot.read_text()
    assert "never-read-0451" not in text and "secrets" not in yaml.safe_load(text)


def test_the_webhooks_own_account_takes_a_namespace_snapshot_without_reading_secrets(
    installed: Installed, namespace: str, tmp_path: Path, gpu_node: str
) -> None:
    plane = installed.plane
    plane.kubectl("create", "quota", "gpus", "-n", namespace, "--hard=requests.nvidia.com/gpu=4")
    out = tmp_path / "team.yaml"
    done = gpu_admission(
        "snapshot", "--kubeconfig", str(installed.sa_kubeconfig),
        "--namespace", namespace, "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = yaml.safe_load(out.read_text())
    assert list(doc["namespaces"]) == [namespace]
    assert [(q["namespace"], q["name"]) for q in doc["resourceQuotas"]] == [(namespace, "gpus")]
    assert {p["namespace"] for p in doc["pods"]} <= {namespace}
    # nodes describe the whole cluster: written whatever the filter
    assert gpu_node in [n["name"] for n in doc["nodes"]]
    assert "secrets" not in doc
    loaded = gpu_admission("rules", "check", "--rules", str(installed.rules),
                           "--cluster-snapshot", str(out))  # fmt: skip
    assert "cluster snapshot" not in loaded.stderr.lower(), loaded.stderr
