"""Two replicas behind one address (a loopback round-robin in front of two `serve` processes,
as the Service spreads the apiserver's connections): a burst against a webhook-only budget
stays within the documented bound (R x the remainder), now with the real watch; and a rolling
restart of both replicas under a steady stream of creates loses none."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

import httpx
import pytest
import yaml

from tests.e2e.proxy import RoundRobin
from tests.e2e.support import (
    Installed,
    apply,
    eventually,
    gpu_pod,
    loopback_webhook_configs,
    start_serve,
    stop_process,
    wait_until_called,
)


@dataclass
class Replica:
    process: Popen[bytes]
    port: int
    probe: int


def reloads(probe: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{probe}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('gpu_admission_rule_reloads_total{result="loaded"}')
    )


@pytest.fixture
def two_replicas(installed: Installed, tmp_path: Path) -> Iterator[tuple[RoundRobin, list]]:
    def start(name: str) -> Replica:
        process, _, port, probe = start_serve(
            tmp_path,
            name=name,
            sa_kubeconfig=installed.sa_kubeconfig,
            certs=installed.certs,
            rules=installed.rules,
        )
        return Replica(process, port, probe)

    replicas = [start("replica-a"), start("replica-b")]
    with RoundRobin([r.port for r in replicas]) as proxy:
        configs = loopback_webhook_configs(
            f"https://127.0.0.1:{proxy.port}", (installed.certs / "ca.crt").read_bytes()
        )
        try:
            apply(installed.plane, configs)
            wait_until_called(installed)
            yield proxy, replicas
        finally:  # also when they never answered: the next tests find the webhook registered
            apply(installed.plane, installed.webhook_configs)
            with ThreadPoolExecutor(max_workers=2) as pool:  # both drain at once
                list(pool.map(stop_process, [r.process for r in replicas]))
    # the restart test swaps replicas in place: the started ones are all in `replicas`
    wait_until_called(installed)


def create(plane, namespace: str, name: str, gpus: int = 1) -> httpx.Response:
    pod = gpu_pod(name, gpus=gpus)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    with httpx.Client(verify=plane.ssl_context(), timeout=30) as client:
        return client.post(f"{plane.url}/api/v1/namespaces/{namespace}/pods", json=pod)


def test_a_burst_on_two_replicas_stays_within_the_documented_bound(
    installed: Installed, namespace: str, two_replicas: tuple[RoundRobin, list]
) -> None:
    _, replicas = two_replicas
    counts = [reloads(r.probe) for r in replicas]
    installed.set_rules(
        yaml.safe_dump(
            {
                "rules": {
                    "gpu-quota": {
                        "budgets": [
                            {
                                "name": "burst",
                                "namespaces": [namespace],
                                "limits": {"nvidia.com/gpu": 8},
                            }
                        ]
                    }
                }
            }
        )
    )
    eventually(
        lambda: all(reloads(r.probe) > c for r, c in zip(replicas, counts, strict=True)),
        what="both replicas reloading the budget",
    )
    answers: list[int] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        status = create(installed.plane, namespace, f"burst-{i}").status_code
        with lock:
            answers.append(status)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted = answers.count(201)
    print(f"\n24 one-GPU creates at once against a budget of 8 on 2 replicas: {admitted} admitted")
    assert 8 <= admitted <= 16, answers
    assert set(answers) <= {201, 403}, answers
    # once both watches show them, neither replica admits another
    time.sleep(2)
    for i in range(4):
        assert create(installed.plane, namespace, f"after-{i}").status_code == 403
    installed.set_rules("{}\n")


def test_a_rolling_restart_of_both_replicas_loses_no_create(
    installed: Installed, namespace: str, two_replicas: tuple[RoundRobin, list], tmp_path: Path
) -> None:
    proxy, replicas = two_replicas
    failures: list[str] = []
    made = 0
    stop = threading.Event()

    def stream() -> None:
        nonlocal made
        with httpx.Client(verify=installed.plane.ssl_context(), timeout=30) as client:
            while not stop.is_set():
                pod = gpu_pod(f"s-{made}")
                answer = client.post(
                    f"{installed.plane.url}/api/v1/namespaces/{namespace}/pods", json=pod
                )
                if answer.status_code != 201:
                    failures.append(answer.text[:300])
                made += 1

    worker = threading.Thread(target=stream)
    worker.start()
    try:
        time.sleep(2)
        for index, name in enumerate(("replica-a2", "replica-b2")):
            process, _, port, probe = start_serve(
                tmp_path,
                name=name,
                sa_kubeconfig=installed.sa_kubeconfig,
                certs=installed.certs,
                rules=installed.rules,
            )
            old = replicas[index]
            # the new one joins the endpoints, then the old one drains and goes (maxSurge 1)
            proxy.backends = [port if p == old.port else p for p in proxy.backends] + [old.port]
            stop_process(old.process)
            proxy.backends = [p for p in proxy.backends if p != old.port]
            replicas[index] = Replica(process, port, probe)
            time.sleep(2)
    finally:
        stop.set()
        worker.join(60)
    print(
        f"\n{made} GPU pod creates during a rolling restart of two replicas, {len(failures)} failed"
    )
    assert made > 20
    assert not failures, failures[:3]
