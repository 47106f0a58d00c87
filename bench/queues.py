#!/usr/bin/env python3
"""What watching Kueue's and KAI's queues costs the live cache: sync time and memory.

The API server is tests/support/fake_apiserver.py (it speaks the real list/watch protocol) in
its own process, so its memory is not counted. It holds N LocalQueues (one per namespace), N
ClusterQueues (each with a CPU/memory group and a GPU group of two flavors, and a status as
Kueue writes it), 4 ResourceFlavors and N KAI Queues (a parent per 10), besides 200 namespaces
and 500 GPU nodes. The cache syncs in this process; the figures are the time from start until
every queue kind is listed (with the core kinds listed beside them), the RSS growth of the
whole cache, and the bytes the queue store itself keeps (every object it reaches, once). It
also times the review of a labelled 32-GPU PyTorchJob on those facts with gpu-queue off and
enforced (the cache stopped first, so its threads do not share the CPU with the timing).

Run from the repository root: `.venv/bin/python bench/queues.py [--queues 0 1000 10000]`.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# `tests.support` from the repository, after PYTHONPATH: a compiled build given there is the
# `webhook` that runs.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

FLAVORS = ("h100", "a100", "l4", "default-flavor")


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cluster_queue(i: int) -> dict[str, Any]:
    gpu = [
        {
            "name": f,
            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 8}],
        }
        for f in ("h100", "a100")
    ]
    usage = [
        {"name": f, "resources": [{"name": "nvidia.com/gpu", "total": "4", "borrowed": "0"}]}
        for f in ("h100", "a100")
    ]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": f"cq-{i}", "uid": f"cq-uid-{i}", "generation": 1},
        "spec": {
            "cohortName": f"cohort-{i % 20}",
            "namespaceSelector": {"matchLabels": {"team": f"team-{i}"}},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": "default-flavor",
                            "resources": [
                                {"name": "cpu", "nominalQuota": 64},
                                {"name": "memory", "nominalQuota": "512Gi"},
                            ],
                        }
                    ],
                },
                {"coveredResources": ["nvidia.com/gpu"], "flavors": gpu},
            ],
        },
        "status": {
            "admittedWorkloads": 2,
            "pendingWorkloads": 1,
            "reservingWorkloads": 2,
            "flavorsReservation": usage,
            "flavorsUsage": usage,
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads",
                    "lastTransitionTime": "2026-11-01T00:00:00Z",
                }
            ],
        },
    }


def serve_fake(queues: int) -> None:
    """Child process: a fake API server holding `queues` of each queue kind."""
    from cache import load_teams_and_nodes

    from tests.support.fake_apiserver import FakeApiServer

    server = FakeApiServer(bookmark_interval=5)
    server.start()
    load_teams_and_nodes(server)
    if queues == 0:
        server.missing.update({"localqueues", "clusterqueues", "resourceflavors", "queues"})
    else:
        server.load(
            "resourceflavors",
            [
                {"metadata": {"name": f}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": f}}}
                for f in FLAVORS
            ],
        )
        server.load("clusterqueues", [cluster_queue(i) for i in range(queues)])
        server.load(
            "localqueues",
            [
                {
                    "metadata": {"name": "default", "namespace": f"team-{i}", "uid": f"lq-{i}"},
                    "spec": {"clusterQueue": f"cq-{i}"},
                    "status": {"admittedWorkloads": 2, "pendingWorkloads": 1},
                }
                for i in range(queues)
            ],
        )
        server.load(
            "queues",
            [
                {
                    "metadata": {"name": f"q-{i}", "uid": f"q-uid-{i}"},
                    "spec": {
                        "parentQueue": f"q-{i - i % 10}" if i % 10 else "",
                        "resources": {
                            "gpu": {"quota": 4, "limit": 16, "overQuotaWeight": 1},
                            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                        },
                    },
                }
                for i in range(queues)
            ],
        )
    print(server.port, flush=True)
    sys.stdin.read()  # until the parent closes it


def start_fake(queues: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--fake-server", str(queues)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    return proc, f"http://127.0.0.1:{port}"


def _job() -> dict[str, Any]:
    container = {
        "name": "pytorch",
        "image": "t:1",
        "resources": {"limits": {"nvidia.com/gpu": "8"}},
    }
    spec = {"replicas": 3, "template": {"spec": {"containers": [container]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "default"}},
        "spec": {"pytorchReplicaSpecs": {"Master": {**spec, "replicas": 1}, "Worker": spec}},
    }


def deep_size(root: object) -> int:
    """Bytes held by `root` and everything it reaches, each object counted once."""
    seen: set[int] = set()
    todo = [root]
    total = 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            todo.extend(obj.keys())
            todo.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            todo.extend(obj)
        elif hasattr(obj, "__slots__"):
            todo.extend(getattr(obj, n) for n in obj.__slots__ if hasattr(obj, n))
        elif hasattr(obj, "__dict__"):
            todo.append(vars(obj))
    return total


def measure(url: str, queues: int) -> tuple[float, float, float, float, float]:
    """(sync seconds, RSS growth MB, MB the queue store keeps, µs per PyTorchJob review with
    gpu-queue off and on)."""
    from kubernetes import client

    from webhook.engine.compiled import compile_rules
    from webhook.engine.pipeline import Stage, evaluate
    from webhook.engine.subject import subject_for
    from webhook.facts.live import LiveCache
    from webhook.ruleset.models import RuleSet

    client.CoreV1Api  # noqa: B018 - import the lazily loaded API modules before measuring
    client.CustomObjectsApi  # noqa: B018
    gc.collect()
    before = rss_mb()
    cfg = client.Configuration()
    cfg.host = url
    cache = LiveCache(client.ApiClient(cfg), page_size=500)
    started = time.perf_counter()
    cache.start()
    assert cache.wait_synced(600)

    def listed() -> bool:
        q = cache.facts_for("team-1").queues
        return (
            q is not None
            and q.local_queues is not None
            and q.cluster_queues is not None
            and q.kai_queues is not None
            and len(q.cluster_queues) == queues
            and len(q.kai_queues) == queues
        )

    while not listed():
        assert time.perf_counter() - started < 600
        time.sleep(0.005)
    took = time.perf_counter() - started
    gc.collect()
    grown = rss_mb() - before
    kept = deep_size(cache.stores.queues) / 2**20
    facts = cache.facts_for("team-1")
    cache.stop()  # the watch threads would share the CPU with the timing below
    obj = _job()
    subject = subject_for(obj, namespace="team-1", group="kubeflow.org", kind="PyTorchJob")
    per = []
    for mode in ("off", "enforce"):
        rules = compile_rules(RuleSet.model_validate({"rules": {"gpu-queue": {"mode": mode}}}))
        for _ in range(200):
            evaluate(subject, rules, facts, stage=Stage.VALIDATE)  # warm up
        rounds = 3000
        t0 = time.perf_counter()
        for _ in range(rounds):
            evaluate(subject, rules, facts, stage=Stage.VALIDATE)
        per.append((time.perf_counter() - t0) / rounds * 1e6)
    return took, grown, kept, per[0], per[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, nargs="+", default=[0, 1000, 10000])
    parser.add_argument("--fake-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_server is not None:
        serve_fake(args.fake_server)
        return
    print(
        "| queues of each kind | sync s | cache RSS MB | queue store MB "
        "| PyTorchJob review µs, gpu-queue off | on |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for n in args.queues:
        proc, url = start_fake(n)
        try:
            # A fresh interpreter per size: RSS growth is not muddled by the previous run.
            out = subprocess.run(
                [sys.executable, __file__, "--measure", url, str(n)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(10)
        print(f"| {n:,} | {out} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--measure":
        took, grown, kept, off, on = measure(sys.argv[2], int(sys.argv[3]))
        print(f"{took:.2f} | {grown:.1f} | {kept:.2f} | {off:.0f} | {on:.0f}")
    else:
        main()
