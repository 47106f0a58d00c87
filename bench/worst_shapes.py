#!/usr/bin/env python3
"""The worst shapes a tenant can post, at growing sizes: time per review, to show the work
grows with the object's size and never with its square.

Run from the repository root: `.venv/bin/python bench/worst_shapes.py [--max-kib 3072]`.
Each shape (many containers x many findings, many env entries, many volumes...) is built at
sizes that double up to --max-kib (the apiserver sends at most ~3 MiB) and sent through the
server's review handler as the webhook runs it (decode, engine with the example snapshot's
facts, encode, metrics; a body over 64 KiB on a worker thread): /mutate then /validate of the
same object, best of --repeat runs. A quadratic step shows as a `x` column far above 2.0
while the size doubles; `us/KiB` is the cost a byte of that shape buys, the bound per review
being the largest of them times the body size; `loop wait` is the longest the event loop
waited for its turn meanwhile (all of it, for a review it decides itself). `make compiled`
first and PYTHONPATH=build/compiled for the build the image ships.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.append(str(REPO))  # after PYTHONPATH: a compiled build given there is the one run

from webhook.engine.build import engine_build  # noqa: E402
from webhook.engine.pipeline import Stage  # noqa: E402
from webhook.facts.snapshotfile import load_snapshot  # noqa: E402
from webhook.facts.sources import ClusterSource  # noqa: E402
from webhook.server.admission import Admission  # noqa: E402
from webhook.server.http import offload  # noqa: E402
from webhook.server.http.routes import Answer, Later  # noqa: E402
from webhook.server.http.routes import Request as HttpRequest  # noqa: E402
from webhook.server.reload import RuleHolder  # noqa: E402

VISIBLE = "NVIDIA_VISIBLE_DEVICES"
KiB = 1024


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}, "spec": spec}


def _daemonset(spec: dict[str, Any]) -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": "w"}}, "spec": spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "w"},
        "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": template},
    }


def agent_findings(n: int) -> dict[str, Any]:
    """A DaemonSet of n containers, each privileged with NVIDIA_VISIBLE_DEVICES=all: two
    denials per container, each with node-agent advice (the pod-wide question)."""
    return _daemonset(
        {
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": f"c{i}",
                    "image": "example.com/agent:1",
                    "securityContext": {"privileged": True},
                    "env": [{"name": VISIBLE, "value": "all"}],
                }
                for i in range(n)
            ],
        }
    )


def gpu_findings(n: int) -> dict[str, Any]:
    """A pod of n GPU containers that every mutation edits and most validations deny: half a
    GPU in requests only, privileged, NVIDIA_VISIBLE_DEVICES=all, a device-list mount, a host
    /dev volume, no probes, no memory limit."""
    containers = [
        {
            "name": f"c{i}",
            "image": "example.com/train:1",
            "resources": {"requests": {"nvidia.com/gpu": "0.5"}},
            "securityContext": {"privileged": True},
            "env": [{"name": VISIBLE, "value": "all"}],
            "volumeMounts": [
                {"name": "dev", "mountPath": "/dev"},
                {"name": "dev", "mountPath": "/var/run/nvidia-container-devices/all"},
            ],
            "livenessProbe": {"exec": {"command": ["true"]}},
        }
        for i in range(n)
    ]
    return _pod(
        {"containers": containers, "volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}]}
    )


def env_entries(n: int) -> dict[str, Any]:
    """One GPU container with n env entries, every other one NVIDIA_VISIBLE_DEVICES."""
    env = [{"name": VISIBLE if i % 2 else f"E{i}", "value": "all"} for i in range(n)]
    container = {"name": "c", "image": "i", "env": env}
    container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return _pod({"containers": [container]})


def env_from(n: int) -> dict[str, Any]:
    """A container that can reach GPU nodes with n envFrom ConfigMaps."""
    refs = [{"configMapRef": {"name": f"m{i}"}} for i in range(n)]
    spec = {"tolerations": [{"operator": "Exists"}]}
    return _pod({**spec, "containers": [{"name": "c", "image": "i", "envFrom": refs}]})


def host_volumes(n: int) -> dict[str, Any]:
    """n host-path volumes of GPU device nodes, each mounted by ten GPU containers."""
    volumes = [{"name": f"v{i}", "hostPath": {"path": f"/dev/nvidia{i}"}} for i in range(n)]
    containers = [
        {
            "name": f"c{j}",
            "image": "i",
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
            "volumeMounts": [{"name": f"v{i}", "mountPath": f"/m{i}"} for i in range(j, n, 10)],
        }
        for j in range(10)
    ]
    return _pod({"containers": containers, "volumes": volumes})


def mounts(n: int) -> dict[str, Any]:
    """One GPU container with n mounts (each a /dev/shm candidate) of n volumes."""
    volumes = [{"name": f"v{i}", "emptyDir": {}} for i in range(n)]
    mounted = [{"name": f"v{i}", "mountPath": f"/dev/shm{i}"} for i in range(n)]
    container = {"name": "c", "image": "i", "volumeMounts": mounted}
    container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return _pod({"containers": [container], "volumes": volumes})


def worker_groups(n: int) -> dict[str, Any]:
    """A RayCluster of n worker groups (n pod specs in one object), each one GPU container
    with requests only."""
    group = {
        "rayStartParams": {},
        "template": {
            "spec": {
                "containers": [
                    {"name": "w", "image": "i", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
                ]
            }
        },
    }
    groups = [{**group, "groupName": f"g{i}", "replicas": 1} for i in range(n)]
    head = {
        "rayStartParams": {},
        "template": {"spec": {"containers": [{"name": "h", "image": "i"}]}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "w"},
        "spec": {"headGroupSpec": head, "workerGroupSpecs": groups},
    }


SHAPES: dict[str, Callable[[int], dict[str, Any]]] = {
    "agent-findings": agent_findings,
    "gpu-findings": gpu_findings,
    "env-entries": env_entries,
    "env-from": env_from,
    "host-volumes": host_volumes,
    "mounts": mounts,
    "worker-groups": worker_groups,
}


def body_of(obj: dict[str, Any]) -> bytes:
    group, _, version = obj["apiVersion"].rpartition("/")
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    resource = {"group": group, "version": version, "resource": obj["kind"].lower() + "s"}
    request = {
        "uid": str(uuid.uuid4()),
        "kind": gvk,
        "resource": resource,
        "requestKind": gvk,
        "requestResource": resource,
        "name": "w",
        "namespace": "ml-team",
        "operation": "CREATE",
        "userInfo": {"username": "tenant", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": True,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return orjson.dumps(review)


def answer(handler: Callable[[HttpRequest], Answer | Later], body: bytes) -> tuple[float, float]:
    """(seconds, longest wait of the event loop) for one review, decided where the server
    decides it: a small one on the loop (which waits for all of it), a large one on a worker
    thread the way the server runs it (`offload.run`) while this thread stands for the loop,
    asking for the GIL every millisecond as a probe arriving would."""
    started = time.perf_counter()
    out = handler(HttpRequest("POST", "/", body))
    if isinstance(out, Later):
        later, result = out, []
        worker = threading.Thread(target=lambda: result.append(offload.run(later)))
        worker.start()
        waited, last = 0.0, time.perf_counter()
        while worker.is_alive():
            time.sleep(0.001)
            now = time.perf_counter()
            waited, last = max(waited, now - last), now
        worker.join()
        out = later.finish(result[0])
    else:
        waited = time.perf_counter() - started
    assert out.status == 200, out.body[:200]
    return time.perf_counter() - started, waited


def measure(
    admission: Admission, build: Callable[[int], dict[str, Any]], n: int, repeat: int
) -> tuple[int, float, float]:
    """(body bytes, best seconds of /mutate + /validate, the loop's longest wait in that run)
    for the shape at n."""
    body = body_of(build(n))
    mutate, validate = admission.review(Stage.MUTATE), admission.review(Stage.VALIDATE)
    best, best_wait = float("inf"), 0.0
    for _ in range(repeat):
        (first, waited), (second, waited_too) = answer(mutate, body), answer(validate, body)
        if first + second < best:
            best, best_wait = first + second, max(waited, waited_too)
    return len(body), best, best_wait


def sizes(build: Callable[[int], dict[str, Any]], max_kib: int) -> list[int]:
    """Counts whose bodies double from ~48 KiB to max_kib."""
    per_unit = (len(body_of(build(200))) - len(body_of(build(100)))) / 100
    fixed = len(body_of(build(100))) - 100 * per_unit
    out, kib = [], 48
    while kib <= max_kib:
        out.append(max(1, round((kib * KiB - fixed) / per_unit)))
        kib *= 2
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-kib", type=int, default=3072)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("shapes", nargs="*", help=f"some of: {', '.join(SHAPES)} (all)")
    args = parser.parse_args()
    unknown = [s for s in args.shapes if s not in SHAPES]
    if unknown:
        parser.error(f"no such shape: {', '.join(unknown)}")
    rules = RuleHolder(source=REPO / "rules")
    assert rules.refresh()
    facts = load_snapshot(REPO / "examples" / "cluster-snapshot.yaml")
    admission = Admission(rules, ClusterSource(facts))
    print(f"engine build: {engine_build()}")
    print("| shape | count | body KiB | ms per review | us/KiB | x (size x2) | loop wait ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    worst = longest = 0.0
    for name in args.shapes or SHAPES:
        build = SHAPES[name]
        previous = None
        for n in sizes(build, args.max_kib):
            size, seconds, waited = measure(admission, build, n, args.repeat)
            per_kib = seconds * 1e6 / (size / KiB)
            worst, longest = max(worst, per_kib), max(longest, waited)
            growth = f"{seconds / previous:.1f}" if previous else ""
            print(
                f"| {name} | {n} | {size // KiB} | {seconds * 1e3:.1f} | {per_kib:.0f} | "
                f"{growth} | {waited * 1e3:.0f} |"
            )
            previous = seconds
            sys.stdout.flush()
    print(f"worst: {worst:.0f} us per KiB, {worst * 3 * KiB / 1e6:.2f} s for a 3 MiB body")
    print(f"longest the event loop waited: {longest * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
