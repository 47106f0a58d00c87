"""`audit --cluster` reads the real apiserver as the webhook's live cache does: the findings it
reports for the workloads of a namespace are the webhook's own verdicts on the same objects,
cluster facts included (a ResourceQuota, a missing PriorityClass)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.e2e.support import (
    ROOT,
    Installed,
    deployment,
    eventually,
    kube_json,
    post_review,
)


def verdicts_of_webhook(installed: Installed, obj: dict[str, Any], namespace: str) -> set[str]:
    answer = post_review(installed, "validate", obj, namespace)
    denied = {f"{line.split(':', 1)[0]}=deny" for line in answer.message.splitlines() if line}
    warned = {f"{w.split(':', 1)[0]}=warn" for w in answer.warnings}
    return {v for v in denied | warned if not v.startswith(("Fix", " "))}


def test_audit_cluster_reports_what_the_webhook_decides_on_the_same_objects(
    installed: Installed, namespace: str
) -> None:
    plane = installed.plane
    plane.kubectl("create", "quota", "gpus", "-n", namespace, "--hard=requests.nvidia.com/gpu=2")
    objects = [
        deployment("within", 1, 1),
        deployment("beyond", 2, 3),
        deployment("no-class", 1, 1, priorityClassName="no-such-class"),
    ]
    # the webhook would refuse one of them at the door: store them while it looks away, as
    # objects made before a rule changed are
    installed.set_rules(
        json.dumps(
            {
                "overrides": [
                    {
                        "name": "look-away",
                        "namespaces": [namespace],
                        "rules": {
                            "gpu-priority-class": {"mode": "off"},
                            "gpu-quota": {"mode": "off"},
                        },
                    }
                ]
            }
        )
    )
    for obj in objects:
        plane.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(obj))
    installed.set_rules("{}\n")
    eventually(
        lambda: (
            "nvidia.com"
            in json.dumps(
                kube_json(plane, "get", "resourcequota", "gpus", "-n", namespace).get("status", {})
            )
        ),
        what="quota status",
    )
    # as a platform engineer runs it, with their own credentials (the webhook's account reads
    # no Deployments)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "audit",
            "--cluster",
            "--kubeconfig",
            str(plane.kubeconfig),
            "--rules",
            str(installed.rules),
            "--namespace",
            namespace,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert report["errors"] == [] and report["notChecked"] == [], report
    by_name = {(r["kind"], r["name"]): r for r in report["results"]}
    seen = set()
    for obj in objects:
        stored = kube_json(plane, "get", "deployment", obj["metadata"]["name"], "-n", namespace)
        result = by_name[("Deployment", obj["metadata"]["name"])]
        audited = {
            f"{f['rule']}={f['verdict']}"
            for f in result["findings"]
            if f["verdict"] in ("deny", "warn")
        }
        assert audited == verdicts_of_webhook(installed, stored, namespace), (obj, result)
        seen |= audited
    # the cluster facts decided something: the quota and the missing class
    assert any(v.startswith("gpu-quota") for v in seen), seen
    assert any(v.startswith("gpu-priority-class") for v in seen), seen
