"""The real scheduler agrees with `gpu-schedulable`: on kwok GPU nodes (counts, products, MIG
profiles, taints, labels), generated GPU pods are created with the rule in warn mode, so all are
stored; every pod the webhook calls never-schedulable stays Pending as Unschedulable, every pod
it calls schedulable binds. Each pod is judged as on the empty cluster (created, watched to its
outcome, deleted), so capacity taken by one pod never decides another: WORKERS pods are in
flight at once and the node set is there COPIES = 2 x WORKERS times over. A pod lands on one
node, so the other workers' pods (the one in flight and, while the scheduler's cache catches up
with its deletion, the one before) hold fewer than COPIES nodes: one copy of every node is
always empty. Identical copies change nothing the webhook or the scheduler can tell from the
nodes' shapes: a pod fits one node or none."""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.support import Installed, concurrently, eventually, gpu_pod, node

PODS = 200
SEED = 20261128
# pods judged at once, and copies of the node set so each finds one empty (see the docstring)
WORKERS = 4
COPIES = 2 * WORKERS
NVIDIA_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
AMD_TAINT = {"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}
PRODUCT = "nvidia.com/gpu.product"

# name, labels, taints, extended resources
NODES: list[tuple[str, dict[str, str], list[dict[str, str]], dict[str, str]]] = [
    (
        "a100-0",
        {PRODUCT: "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"},
        [NVIDIA_TAINT],
        {"nvidia.com/gpu": "8"},
    ),
    (
        "a100-1",
        {PRODUCT: "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8"},
        [NVIDIA_TAINT],
        {"nvidia.com/gpu": "8"},
    ),
    (
        "l4-0",
        {PRODUCT: "NVIDIA-L4", "nvidia.com/gpu.count": "1"},
        [NVIDIA_TAINT],
        {"nvidia.com/gpu": "1"},
    ),
    (
        "h100-mig-0",
        {PRODUCT: "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig.strategy": "mixed"},
        [NVIDIA_TAINT],
        {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"},
    ),
    (
        "mi300-0",
        {"amd.com/gpu.product-name": "AMD_Instinct_MI300X"},
        [AMD_TAINT],
        {"amd.com/gpu": "8"},
    ),
    ("cpu-0", {}, [], {}),
]
PRODUCTS = ["NVIDIA-A100-SXM4-80GB", "NVIDIA-L4", "NVIDIA-H100-80GB-HBM3", "Tesla-T4"]


def generated_pods(count: int) -> Iterator[dict[str, Any]]:
    """GPU pods of every shape the rule judges: whole GPUs by count and product, MIG profiles
    that exist and that do not, AMD GPUs, and several GPU containers in one pod."""
    rng = random.Random(SEED)
    for i in range(count):
        pod = gpu_pod(f"p{i}")
        container = pod["spec"]["containers"][0]
        requests = container["resources"]["requests"]
        del requests["nvidia.com/gpu"]
        shape = rng.choice(["gpus", "gpus", "product", "mig", "amd", "two-containers"])
        if shape in ("gpus", "product", "two-containers"):
            requests["nvidia.com/gpu"] = str(rng.randint(1, 10))
        if shape == "product":
            pod["spec"]["nodeSelector"] = {PRODUCT: rng.choice(PRODUCTS)}
        if shape == "mig":
            profile = rng.choice(
                ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb"]
            )
            requests[profile] = str(rng.randint(1, 8))
        if shape == "amd":
            requests["amd.com/gpu"] = str(rng.randint(1, 10))
        if shape == "two-containers":
            second = {
                **container,
                "name": "second",
                "resources": {
                    "requests": {"nvidia.com/gpu": str(rng.randint(1, 8))},
                    "limits": {"memory": "1Gi"},
                },
            }
            pod["spec"]["containers"].append(second)
        yield pod


WARNING = re.compile(r'^\d{3} \S+ "((?:[^"\\]|\\.)*)"$')


def warnings_of(answer: httpx.Response) -> list[str]:
    found = []
    for value in answer.headers.get_list("warning"):
        match = WARNING.match(value.strip())
        found.append(match.group(1).replace('\\"', '"') if match else value)
    return found


@pytest.fixture(scope="module")
def gpu_nodes(installed: Installed) -> Iterator[None]:
    plane = installed.plane
    copies = [
        node(name if copy == 0 else f"{name}-copy{copy}", labels, taints, gpus)
        for copy in range(COPIES)
        for name, labels, taints, gpus in NODES
    ]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(copies))
    eventually(
        lambda: (
            plane.kubectl(
                "get",
                "nodes",
                "-o",
                "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}",
            )
            .stdout.split()
            .count("True")
            == len(copies)
        ),
        what="kwok nodes Ready",
    )
    yield
    plane.kubectl("delete", "nodes", "-l", "type=kwok", "--wait=false", check=False)


def outcome(client: httpx.Client, base: str, name: str) -> str | None:
    pod = client.get(f"{base}/{name}").json()
    if pod["spec"].get("nodeName"):
        return "bound"
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return "unschedulable"
    return None


def test_the_scheduler_agrees_with_gpu_schedulable(
    installed: Installed, namespace: str, gpu_nodes: None
) -> None:
    plane = installed.plane
    installed.set_rules(
        yaml.safe_dump(
            {
                "overrides": [
                    {
                        "name": "scheduler-agreement",
                        "namespaces": [namespace],
                        "rules": {"gpu-schedulable": {"mode": "warn", "autoscaling": "none"}},
                    }
                ]
            }
        )
    )
    base = f"{plane.url}/api/v1/namespaces/{namespace}/pods"
    agreed: dict[tuple[str, str], int] = {}
    disagreements = []
    lock = threading.Lock()
    with httpx.Client(verify=plane.ssl_context(), timeout=30) as client:
        # the live cache has all the nodes once a pod too big for every node is warned
        probe = gpu_pod("probe", gpus=9)
        eventually(
            lambda: any(
                w.startswith("gpu-schedulable")
                for w in warnings_of(client.post(f"{base}?dryRun=All", json=probe))
            ),
            what="nodes in the live cache",
        )

    def judge(pod: dict[str, Any]) -> None:
        """One pod created, watched to the scheduler's decision, deleted and gone."""
        name = pod["metadata"]["name"]
        with httpx.Client(verify=plane.ssl_context(), timeout=30) as client:
            answer = client.post(base, json=pod)
            assert answer.status_code == 201, answer.text
            warned = [w for w in warnings_of(answer) if w.startswith("gpu-schedulable")]
            webhook = "unschedulable" if warned else "bound"
            deadline = time.monotonic() + 30
            while (scheduler := outcome(client, base, name)) is None:
                assert time.monotonic() < deadline, f"{name}: the scheduler never decided"
                time.sleep(0.05)
            with lock:
                agreed[(webhook, scheduler)] = agreed.get((webhook, scheduler), 0) + 1
                if webhook != scheduler:
                    disagreements.append((name, pod["spec"], warned, scheduler))
            client.delete(f"{base}/{name}", params={"gracePeriodSeconds": "0"})
            # its copy of the nodes is empty again before this worker takes the next pod
            eventually(
                lambda n=name: client.get(f"{base}/{n}").status_code == 404,  # type: ignore[misc]
                what=f"{name} deleted",
            )

    concurrently(judge, generated_pods(PODS), WORKERS)
    print(f"\nscheduler agreement on {PODS} pods (webhook, scheduler): {agreed}")
    assert not disagreements, disagreements[:5]
    assert agreed.get(("bound", "bound")) and agreed.get(("unschedulable", "unschedulable"))
