"""GPU pod creates through a real kube-apiserver: what the webhook and the native policies add.

One control plane (tests/e2e: kube-apiserver, etcd, controller-manager, scheduler, built by
`make controlplane`), gpu-admission installed as the shipped manifests install it, and N GPU
pod creates (requests = limits, so the apiserver alone admits them too) in each of three
set-ups, one after the other on the same cluster:

  none     no webhook configuration, no policy: the apiserver and etcd alone
  webhook  the shipped Mutating/ValidatingWebhookConfigurations, calling `serve` on loopback
  native   the exported ValidatingAdmissionPolicies and MutatingAdmissionPolicies (1.36+)

For each: creates/s, p50 and p99 of one create as the client sees it, and the CPU seconds per
1,000 creates of kube-apiserver, etcd and the webhook (from /proc, user + system).

    make controlplane
    PYTHONSAFEPATH=1 PYTHONPATH=build/compiled .venv/bin/python bench/apiserver.py \\
        --version v1.37.2 --creates 1000 --clients 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
# `tests.support` from the repository, after PYTHONPATH: a compiled build given there is the
# `webhook` that runs.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

from tests.e2e import binaries, cluster  # noqa: E402
from tests.e2e.support import gpu_pod, install, stop_process  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def creates(
    plane: cluster.ControlPlane, namespace: str, count: int, clients: int, prefix: str = "p"
) -> tuple[list[float], float]:
    """`count` pod creates from `clients` keep-alive clients; each create's seconds, and the
    wall time of them all."""
    url = f"{plane.url}/api/v1/namespaces/{namespace}/pods"
    latencies: list[float] = []
    lock = threading.Lock()
    failures: list[str] = []

    def client(index: int) -> None:
        mine = []
        with httpx.Client(verify=plane.ssl_context(), timeout=30) as http:
            for i in range(index, count, clients):
                pod = gpu_pod(f"{prefix}{i}")
                resources = pod["spec"]["containers"][0]["resources"]
                resources["limits"]["nvidia.com/gpu"] = resources["requests"]["nvidia.com/gpu"]
                body = json.dumps(pod)
                started = time.perf_counter()
                answer = http.post(url, content=body, headers={"Content-Type": "application/json"})
                mine.append(time.perf_counter() - started)
                if answer.status_code != 201:
                    failures.append(answer.text[:300])
        with lock:
            latencies.extend(mine)

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    if failures:
        raise SystemExit(f"{len(failures)} creates failed, e.g.: {failures[0]}")
    return latencies, wall


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def exported_policies(plane: cluster.ControlPlane) -> list[dict[str, Any]]:
    minor = plane.release.minor.removeprefix("v")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "export",
            "--rules",
            str(REPO / "manifests/base/rules"),
            "--kubernetes",
            minor,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return [
        d
        for d in yaml.safe_load_all(done.stdout)
        if d and d["kind"].endswith(("Policy", "PolicyBinding"))
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=binaries.RELEASES[-1].kubernetes)
    parser.add_argument("--creates", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    release = binaries.release_named(args.version)
    if not binaries.is_built(release):
        raise SystemExit(f"no control plane for {release.kubernetes}: run `make controlplane`")
    plane = cluster.ControlPlane(release).start()
    folder = Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    try:
        hook = install(plane, folder)
        pids = {
            "kube-apiserver": next(p for p in plane.processes if p.name == "kube-apiserver"),
            "etcd": next(p for p in plane.processes if p.name == "etcd"),
        }
        policies = exported_policies(plane)
        setups = ["webhook", "none"] + (["native"] if policies else [])
        rows = []
        for setup in setups:
            if setup == "none":
                for config in hook.webhook_configs:
                    plane.kubectl("delete", config["kind"].lower(), config["metadata"]["name"])
            if setup == "native":
                plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(policies))
                time.sleep(3)  # the apiserver compiles new policies within a second or so
            namespace = f"bench-{setup}"
            plane.kubectl("create", "namespace", namespace)
            while plane.kubectl("get", "sa", "default", "-n", namespace, check=False).returncode:
                time.sleep(0.1)
            creates(plane, namespace, 50, args.clients, prefix="warm")  # warm the paths up
            before = {k: cpu_seconds(p.popen.pid) for k, p in pids.items()}
            before["webhook"] = cpu_seconds(hook.process.pid)
            latencies, wall = creates(plane, namespace, args.creates, args.clients)
            after = {k: cpu_seconds(p.popen.pid) for k, p in pids.items()}
            after["webhook"] = cpu_seconds(hook.process.pid)
            per_k = {k: (after[k] - before[k]) * 1000 / args.creates for k in after}
            sample = plane.kubectl("get", "pod", "p0", "-n", namespace, "-o", "json").stdout
            tolerations = json.loads(sample)["spec"].get("tolerations", [])
            rows.append(
                (
                    setup,
                    args.creates / wall,
                    statistics.median(latencies) * 1000,
                    percentile(latencies, 0.99) * 1000,
                    per_k,
                    any(t.get("key") == "nvidia.com/gpu" for t in tolerations),
                )
            )
            plane.kubectl("delete", "namespace", namespace, "--wait=false")
        print(
            f"\nKubernetes {release.kubernetes}: {args.creates} GPU pod creates per set-up, "
            f"{args.clients} clients, {os.cpu_count()} cores\n"
        )
        print(
            "| set-up | creates/s | p50 ms | p99 ms | CPU s / 1k creates: apiserver | etcd "
            "| webhook | GPU toleration added |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        for setup, rate, p50, p99, cpu, mutated in rows:
            print(
                f"| {setup} | {rate:.0f} | {p50:.1f} | {p99:.1f} | {cpu['kube-apiserver']:.2f} "
                f"| {cpu['etcd']:.2f} | {cpu['webhook']:.2f} | {'yes' if mutated else 'no'} |"
            )
        stop_process(hook.process)
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
