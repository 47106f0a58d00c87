"""The live cache on a real watch: a new ResourceQuota, PriorityClass, namespace label or GPU
node reaches the webhook's decisions within seconds, and after the apiserver restarts on a
compacted etcd (every watch cut, every old resourceVersion gone) the cache lists again, so a
change it never saw as an event is decided on, not lost."""

from __future__ import annotations

import time
from collections.abc import Callable

import yaml

from tests.e2e.support import Installed, eventually, gpu_pod, post_review, priority_class

# what the docs promise for a change on a healthy apiserver (docs/cluster-facts.md)
SECONDS = 5.0


def timed(check: Callable[[], bool], seconds: float, what: str) -> float:
    started = time.monotonic()
    eventually(check, seconds=seconds, what=what)
    return time.monotonic() - started


def denied_by(hook: Installed, pod: dict, namespace: str, rule: str) -> bool:
    answer = post_review(hook, "validate", pod, namespace)
    return not answer.allowed and rule in answer.message


def test_cluster_changes_reach_decisions_within_seconds(
    installed: Installed, namespace: str
) -> None:
    plane = installed.plane
    took: dict[str, float] = {}
    pod = gpu_pod("asks-two", gpus=2)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"

    plane.kubectl("create", "quota", "gpus", "-n", namespace, "--hard=requests.nvidia.com/gpu=1")
    took["ResourceQuota"] = timed(
        lambda: denied_by(installed, pod, namespace, "gpu-quota"), SECONDS, "a new ResourceQuota"
    )

    plane.kubectl("label", "namespace", namespace, "gpu-admission.e2e/tier=research")
    installed.set_rules(
        yaml.safe_dump(
            {
                "overrides": [
                    {
                        "name": "by-label",
                        "namespaceSelector": {
                            "matchLabels": {"gpu-admission.e2e/tier": "research"}
                        },
                        "rules": {"gpu-quota": {"mode": "off"}},
                    }
                ]
            }
        )
    )
    took["namespace label"] = timed(
        lambda: post_review(installed, "validate", pod, namespace).allowed,
        SECONDS,
        "a namespace label selecting an override",
    )

    priority_class(plane, "e2e-live", 10)
    installed.set_rules(
        yaml.safe_dump({"rules": {"gpu-priority-class": {"defaultClass": "e2e-live"}}})
    )
    took["PriorityClass"] = timed(
        lambda: any(
            op["path"] == "/spec/priorityClassName"
            for op in post_review(installed, "mutate", pod, namespace).patch
        ),
        SECONDS,
        "a new PriorityClass",
    )
    installed.set_rules("{}\n")
    plane.kubectl("delete", "priorityclass", "e2e-live")
    print(f"\nseconds from the change to a decision on it: {took}")


def test_a_restarted_apiserver_on_a_compacted_etcd_is_relisted_not_lost(
    installed: Installed, namespace: str
) -> None:
    plane = installed.plane
    pod = gpu_pod("asks-two", gpus=2)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    assert post_review(installed, "validate", pod, namespace).allowed
    lines_before = len(installed.log_lines())
    # the apiserver goes; while it is away nobody can watch, and etcd forgets the past
    old = next(p for p in plane.processes if p.name == "kube-apiserver")
    old.stop()
    plane.compact_etcd()
    restarted = time.monotonic()
    plane.restart_apiserver()
    # a change the cache never saw as an event: it exists only in the next list
    plane.kubectl("create", "quota", "gpus", "-n", namespace, "--hard=requests.nvidia.com/gpu=1")
    took = timed(
        lambda: denied_by(installed, pod, namespace, "gpu-quota"),
        90,
        "the quota made after the restart",
    )
    print(
        f"\nseconds from the apiserver's restart to a decision on the new quota: "
        f"{time.monotonic() - restarted:.1f} (after the quota: {took:.1f})"
    )
    # a cut watch is not resumed from its old resourceVersion (gone with the compaction):
    # every kind is listed again
    relisted = [
        line
        for line in installed.log_lines()[lines_before:]
        if "resourcequotas: listed" in str(line.get("msg", ""))
    ]
    assert relisted, installed.tail()
