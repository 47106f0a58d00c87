#!/usr/bin/env python3
"""Live-cache benchmark: memory and time to sync at 10k and 100k pods, and admission latency
with the cache full versus empty (0 pods: the same rules run, with nothing to add up).

The API server is tests/support/fake_apiserver.py (it speaks the real list/watch protocol) in
its own process, so its memory is not counted. The cache syncs in this process; RSS is measured
before and after. Latency: the real webhook (`serve --kubeconfig`) answers /validate for a GPU
pod in a namespace with a quota budget, over HTTPS with keep-alive, sequentially (one apiserver
connection), so the numbers are per-request latency, not throughput.

Run from the repository root: `.venv/bin/python bench/cache.py [--pods 0 10000 100000]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# `tests.support` from the repository, after PYTHONPATH: a compiled build given there is the
# `webhook` that runs.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))


def rss_mb(pid: int | None = None) -> float:
    with open(f"/proc/{pid or os.getpid()}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def synthetic_pod(i: int) -> dict[str, Any]:
    """A realistic-sized GPU pod as the API server returns it (status, defaults, labels)."""
    ns = f"team-{i % 200}"
    return {
        "metadata": {
            "name": f"train-{i}",
            "namespace": ns,
            "uid": str(uuid.UUID(int=i)),
            "labels": {"app": "train", "pod-template-hash": "5d8f7c9b6"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": f"train-{i}",
                    "uid": "u",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": f"h100-{i % 500}",
            "restartPolicy": "Never",
            "priorityClassName": "gpu-training",
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(1 + i % 8), "memory": "64Gi", "cpu": "8"},
                        "requests": {
                            "nvidia.com/gpu": str(1 + i % 8),
                            "memory": "64Gi",
                            "cpu": "8",
                        },
                    },
                    "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                }
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1", "hostIP": "10.1.0.1"},
    }


def load_teams_and_nodes(server: Any) -> None:
    """The cluster every cache benchmark starts from: 200 team namespaces, 500 H100 nodes."""
    server.load("namespaces", [{"metadata": {"name": f"team-{n}"}} for n in range(200)])
    server.load(
        "nodes",
        [
            {
                "metadata": {"name": f"h100-{n}", "labels": {"nvidia.com/gpu.product": "H100"}},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            }
            for n in range(500)
        ],
    )


def serve_fake(pods: int) -> None:
    """Child process: a fake API server holding `pods` GPU pods, 500 nodes, 200 namespaces."""
    from tests.support.fake_apiserver import FakeApiServer

    server = FakeApiServer(bookmark_interval=5)
    server.start()
    load_teams_and_nodes(server)
    server.load("priorityclasses", [{"metadata": {"name": "gpu-training"}, "value": 1000}])
    server.load("pods", [synthetic_pod(i) for i in range(pods)])
    print(server.port, flush=True)
    sys.stdin.read()  # until the parent closes it


def start_fake(pods: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--fake-server", str(pods)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = proc.stdout.readline().strip()
    return proc, f"http://127.0.0.1:{port}"


def measure_sync(url: str) -> tuple[float, float, int]:
    from kubernetes import client

    from webhook.facts.live import LiveCache

    client.CoreV1Api  # noqa: B018 - import the lazily loaded API modules before measuring
    client.SchedulingV1Api  # noqa: B018
    gc.collect()
    before = rss_mb()
    cfg = client.Configuration()
    cfg.host = url
    cache = LiveCache(client.ApiClient(cfg), page_size=500)
    started = time.perf_counter()
    cache.start()
    assert cache.wait_synced(600)
    took = time.perf_counter() - started
    gc.collect()
    grown = rss_mb() - before
    count = cache.pod_count
    cache.stop()
    return took, grown, count


def measure_latency(url: str | None, requests: int) -> tuple[float, float]:
    """p50 and p99 (ms) of /validate through the real server, keep-alive, one connection."""
    import http.client

    from tests.support.fake_apiserver import kubeconfig_for
    from tests.support.reviews import review_for
    from tests.support.webhook import start_webhook, stop_webhook
    from webhook.certs.generate import generate

    tmp = Path(tempfile.mkdtemp())
    generate(tmp / "certs", ["127.0.0.1"])
    import yaml

    budget = {"name": "teams", "namespaces": ["team-*"], "limits": {"nvidia.com/gpu": 100000}}
    rules = {"rules": {"gpu-quota": {"budgets": [budget]}}}  # the rest: built-in defaults
    (tmp / "rules").mkdir()
    (tmp / "rules" / "r.yaml").write_text(yaml.safe_dump(rules))
    args: tuple[str, ...] = ("--no-cluster",)
    if url is not None:
        (tmp / "kubeconfig").write_text(kubeconfig_for(url))
        args = ("--kubeconfig", str(tmp / "kubeconfig"))
    hook = start_webhook(tmp / "certs", tmp / "rules", tmp / "server.log", *args, ready_timeout=900)
    hook.client.close()
    try:
        pod = synthetic_pod(10**7)
        pod["metadata"] = {"generateName": "train-", "namespace": "team-1"}
        pod["apiVersion"], pod["kind"] = "v1", "Pod"
        pod["spec"].pop("nodeName")
        host, port = hook.url.removeprefix("https://").split(":")
        ctx = ssl.create_default_context(cafile=tmp / "certs" / "ca.crt")
        conn = http.client.HTTPSConnection(host, int(port), context=ctx)
        times = []
        for i in range(requests + 200):
            body = json.dumps(review_for(pod, namespace="team-1", dry_run=True)).encode()
            started = time.perf_counter()
            conn.request(
                "POST", "/validate?timeout=10s", body, {"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            resp.read()
            if i >= 200:  # warm-up excluded
                times.append(time.perf_counter() - started)
            assert resp.status == 200
        times.sort()
        return times[len(times) // 2] * 1000, times[int(len(times) * 0.99)] * 1000
    finally:
        stop_webhook(hook)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[0, 10_000, 100_000])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--fake-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_server is not None:
        serve_fake(args.fake_server)
        return
    os.chdir(REPO)
    rows = []
    for pods in args.pods:
        proc, url = start_fake(pods)
        try:
            took, grown, count = measure_sync(url)
            assert count == pods, (count, pods)
            p50, p99 = measure_latency(url, args.requests)
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(30)
        rows.append(
            (f"{pods:,} GPU pods", f"{took:.1f}", f"{grown:.0f}", f"{p50:.2f}", f"{p99:.2f}")
        )
        print(" | ".join(rows[-1]), flush=True)
    print("\n| cache | sync s | cache RSS MB | /validate p50 ms | p99 ms |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\ncommand: .venv/bin/python bench/cache.py --pods {' '.join(map(str, args.pods))}")


if __name__ == "__main__":
    main()
