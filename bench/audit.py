#!/usr/bin/env python3
"""Audit throughput: objects per second over a generated folder of mixed manifests, and the
peak memory of the run (the audit streams file by file, document by document).

Run from the repository root: `.venv/bin/python bench/audit.py [--objects 10000]`. The audit
runs in a child process (`gpu-admission audit DIR -o json`) pinned to one core, so its peak RSS
and CPU time are its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent


def container(i: int, gpu: bool) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": "4", "memory": "32Gi"}
    if gpu:
        limits["nvidia.com/gpu"] = str(1 + i % 4) if i % 17 else "0.5"  # a few fractional
    return {
        "name": f"c{i}",
        "image": "vllm/vllm-openai:v0.6.3",
        "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000"],
        "ports": [{"containerPort": 8000}],
        "env": [{"name": "HF_HOME", "value": "/data"}],
        "resources": {"limits": limits},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
    }


def objects(i: int) -> list[dict[str, Any]]:
    """Ten documents: GPU and non-GPU Deployments, Jobs, Pods, a RayCluster, a ConfigMap."""
    meta = {"name": f"app-{i}", "namespace": f"team-{i % 50}", "labels": {"app": f"app-{i}"}}
    template = {
        "metadata": {"labels": {"app": f"app-{i}"}},
        "spec": {"containers": [container(i, True)]},
    }
    plain = {
        "metadata": {"labels": {"app": f"web-{i}"}},
        "spec": {"containers": [container(i, False)]},
    }
    selector = {"matchLabels": {"app": f"app-{i}"}}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 2, "selector": selector, "template": template}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {**meta, "name": f"web-{i}"},
         "spec": {"replicas": 3, "selector": selector, "template": plain}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {**meta, "name": f"train-{i}"},
         "spec": {"template": {"spec": {**template["spec"], "restartPolicy": "Never"}}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": f"pod-{i}"},
         "spec": template["spec"]},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": f"web-pod-{i}"},
         "spec": plain["spec"]},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {**meta, "name": f"db-{i}"},
         "spec": {"serviceName": "db", "selector": selector, "template": plain}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {**meta, "name": f"cron-{i}"},
         "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {
             "spec": {**template["spec"], "restartPolicy": "Never"}}}}}},
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {**meta, "name": f"ray-{i}"},
         "spec": {"headGroupSpec": {"template": plain},
                  "workerGroupSpecs": [{"groupName": "gpu", "template": template}]}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": f"cfg-{i}"},
         "data": {"a": "b"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {**meta, "name": f"svc-{i}"},
         "spec": {"ports": [{"port": 80}]}},
    ]  # fmt: skip


def generate(folder: Path, count: int) -> int:
    written = 0
    for i in range(count // 10):
        docs = objects(i)
        (folder / f"app-{i}.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
        written += len(docs)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        total = generate(folder, args.objects)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        result = subprocess.run(
            [
                "taskset",
                "-c",
                "0",
                sys.executable,
                "-m",
                "webhook",
                "audit",
                str(folder),
                "--rules",
                str(REPO / "rules"),
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ},
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode not in (0, 1):
        sys.exit(f"audit failed ({result.returncode}): {result.stderr}")
    summary = json.loads(result.stdout)["summary"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(
        f"documents: {total} ({summary['objects']} workloads audited, {summary['skipped']} skipped)"
    )
    print(
        f"verdicts: {summary['denied']} denied, {summary['warned']} warned, "
        f"{summary['mutated']} mutated"
    )
    print(f"wall {wall:.2f} s, CPU {cpu:.2f} s on one core")
    print(
        f"throughput: {total / wall:,.0f} documents/s, {summary['objects'] / wall:,.0f} workloads/s"
    )
    print(f"peak RSS of the audit process: {after.ru_maxrss / 1024:.0f} MB")
    print(f"command: .venv/bin/python bench/audit.py --objects {args.objects}")


if __name__ == "__main__":
    main()
