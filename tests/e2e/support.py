"""What the end-to-end tests share: the installed webhook's handle, a GPU pod as users write
it, AdmissionReviews posted straight to the webhook as the apiserver posts them, and waits."""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from tests.e2e import cluster as clustermod
from tests.support.reviews import (  # the unit suite's AdmissionReview and its answer
    Answer,
    review_for,
)

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
MANIFESTS = ROOT / "manifests"


@dataclass
class Installed:
    """The webhook as installed: the serving process, its URLs and the objects registered."""

    plane: clustermod.ControlPlane
    process: subprocess.Popen[bytes]
    log: Path
    url: str
    probe_url: str
    rules: Path
    certs: Path
    webhook_configs: list[dict[str, Any]]
    sa_kubeconfig: Path

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include `labels` (0 when none)."""
        with urllib.request.urlopen(f"{self.probe_url}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name):
                continue
            match = re.match(r"^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)$", line)
            if not match or match.group(1) != name:
                continue
            found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(3) or ""))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(match.group(4))
        return total

    def log_lines(self) -> list[dict[str, Any]]:
        lines = []
        for raw in self.log.read_text(errors="replace").splitlines():
            try:
                lines.append(json.loads(raw))
            except ValueError:
                lines.append({"message": raw})
        return lines

    def set_rules(self, text: str) -> None:
        """Lay `text` over the shipped rules as e2e.yaml and wait for the server to load it."""
        extra = self.rules / "e2e.yaml"
        if extra.exists() and extra.read_text() == text:
            return  # the same contents: the server keeps what it has, and says nothing
        before = self.metric("gpu_admission_rule_reloads_total", result="loaded")
        extra.write_text(text)
        deadline = time.monotonic() + 20
        while self.metric("gpu_admission_rule_reloads_total", result="loaded") <= before:
            assert time.monotonic() < deadline, f"rules not reloaded:\n{self.tail()}"
            time.sleep(0.1)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        stop_process(self.process)

    def start(self) -> None:
        """Serve again on the same port (the registered URL), as a restarted replica would."""
        self.process, self.log, _, probe = start_serve(
            self.log.parent,
            name=f"serve-{int(time.time())}",
            port=self.port,
            sa_kubeconfig=self.sa_kubeconfig,
            certs=self.certs,
            rules=self.rules,
        )
        self.probe_url = f"http://127.0.0.1:{probe}"

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def serve_command() -> list[str]:
    """`gpu-admission serve` as this interpreter runs it: the compiled build when PYTHONPATH puts
    it first (`make e2e` does), else the sources."""
    return [sys.executable, "-m", "webhook", "serve"]


def start_serve(
    folder: Path,
    *,
    name: str = "serve",
    port: int = 0,
    sa_kubeconfig: Path,
    certs: Path,
    rules: Path,
) -> tuple[subprocess.Popen[bytes], Path, int, int]:
    port, probe = port or clustermod.free_port(), clustermod.free_port()
    log = folder / f"{name}.log"
    with log.open("ab") as fh:
        process = subprocess.Popen(
            [
                *serve_command(),
                "--host=127.0.0.1",
                f"--port={port}",
                f"--probe-port={probe}",
                f"--cert={certs / 'tls.crt'}",
                f"--key={certs / 'tls.key'}",
                f"--rules={rules}",
                f"--kubeconfig={sa_kubeconfig}",
                "--log-format=json",
                "--rules-check-seconds=0.5",
                "--drain-seconds=1",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=clustermod._die_with_parent,
        )
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"serve exited early:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as r:
                if r.status == 200:
                    break
        except urllib.error.HTTPError as unready:  # 503 until the cache has synced
            unready.close()  # it holds the answer's socket
        except OSError:
            pass
        if time.monotonic() > deadline:
            stop_process(process)  # reaped, not left running for the collector to warn of
            raise AssertionError(f"serve not ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    return process, log, port, probe


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def shipped(path: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / path).read_text()) if d]


def loopback_webhook_configs(url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The shipped Validating/MutatingWebhookConfigurations with only clientConfig rewritten."""
    configs = []
    for doc in shipped("base/webhooks.yaml"):
        doc = copy.deepcopy(doc)
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"{url}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
        configs.append(doc)
    return configs


def apply(plane: clustermod.ControlPlane, docs: list[dict[str, Any]]) -> None:
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))


def wait_until_called(hook: Installed) -> None:
    """The apiserver picks a new webhook configuration up within a second or so: wait until a
    server-side dry run of a GPU pod comes back mutated."""
    pod = gpu_pod("probe-ready")
    deadline = time.monotonic() + 30
    while True:
        done = hook.plane.kubectl(
            "create",
            "--dry-run=server",
            "-o",
            "json",
            "-n",
            "default",
            "-f",
            "-",
            stdin=json.dumps(pod),
            check=False,
        )
        if done.returncode == 0 and json.loads(done.stdout)["spec"]["containers"][0][
            "resources"
        ].get("limits"):
            return
        assert time.monotonic() < deadline, f"webhook never called:\n{done.stderr}\n{hook.tail()}"
        time.sleep(0.3)


def install(plane: clustermod.ControlPlane, folder: Path) -> Installed:
    """gpu-admission installed as the shipped manifests install it, serving from `folder`."""
    if os.environ.get("GPU_ADMISSION_EXPECT_COMPILED"):
        # `make e2e` serves the compiled build the image ships: make sure that is what runs
        where = subprocess.run(
            [
                sys.executable,
                "-c",
                "import importlib; print(importlib.import_module('webhook.engine.admit').__file__)",
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout.strip()
        assert where.endswith(".so"), f"serve would run the sources ({where}), not the build"
    apply(plane, shipped("base/namespace.yaml") + shipped("base/rbac.yaml"))
    token = plane.kubectl(
        "create", "token", "gpu-admission", "-n", "gpu-admission", "--duration=4h"
    ).stdout.strip()
    sa_kubeconfig = folder / "sa.kubeconfig"
    sa_kubeconfig.write_text(
        clustermod.kubeconfig_text(plane.url, plane.pki.ca_cert, user={"token": token})
    )
    certs = folder / "certs"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "certs",
            "generate",
            "--out",
            str(certs),
            "--hosts",
            "127.0.0.1,localhost",
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    rules = folder / "rules"
    rules.mkdir()
    shutil.copy(MANIFESTS / "base" / "rules" / "team.yaml", rules / "team.yaml")
    process, log, port, probe = start_serve(
        folder, sa_kubeconfig=sa_kubeconfig, certs=certs, rules=rules
    )
    url = f"https://127.0.0.1:{port}"
    configs = loopback_webhook_configs(url, (certs / "ca.crt").read_bytes())
    apply(plane, configs)
    hook = Installed(
        plane, process, log, url, f"http://127.0.0.1:{probe}", rules, certs, configs, sa_kubeconfig
    )
    wait_until_called(hook)
    return hook


def gpu_pod(name: str, gpus: int = 1, **extra: Any) -> dict[str, Any]:
    """A GPU pod as a user writes it: the GPU in requests only, a memory limit, probes."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "model",
                    "image": "vllm/vllm-openai:v0.6.0",
                    "resources": {
                        "requests": {"nvidia.com/gpu": str(gpus), "memory": "8Gi", "cpu": "1"},
                        "limits": {"memory": "8Gi"},
                    },
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
                }
            ]
        },
    }
    pod["spec"].update(extra)
    return pod


def eventually(check: Callable[[], Any], seconds: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"not reached in {seconds} s: {what}"
        time.sleep(0.2)


def concurrently(work: Callable[[T], object], items: Iterable[T], workers: int) -> None:
    """`work` on every item, `workers` at a time. The first failure (or a Ctrl-C) cancels what
    has not started and is raised once the few in flight are done: no thread outlives the test."""
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        for future in [pool.submit(work, item) for item in items]:
            future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def priority_class(plane: clustermod.ControlPlane, name: str, value: int, **extra: str) -> None:
    """A PriorityClass in the cluster (`preemptionPolicy`, `description` as keywords)."""
    obj = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **extra,
    }
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(obj))


def exported_quotas(
    plane: clustermod.ControlPlane, folder: Path, budgets: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The ResourceQuotas `gpu-admission export` writes for a rule file holding these budgets,
    for the control plane's Kubernetes version."""
    rules = folder / "rules"
    rules.mkdir()
    (rules / "team.yaml").write_text(yaml.safe_dump({"rules": {"gpu-quota": {"budgets": budgets}}}))
    exported = subprocess.run(
        [sys.executable, "-m", "webhook", "export", "--rules", str(rules),
         "--kubernetes", plane.release.minor.removeprefix("v")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(exported) if d and d["kind"] == "ResourceQuota"]


def kube_json(plane: clustermod.ControlPlane, *args: str) -> Any:
    return json.loads(plane.kubectl(*args, "-o", "json").stdout)


# --- AdmissionReviews straight to the webhook, as the apiserver posts them --------------------


def post_review(
    hook: Installed, endpoint: str, obj: dict[str, Any], namespace: str, *, dry_run: bool = True
) -> Answer:
    """One AdmissionReview for `obj` as the apiserver sends it (a dry run by default, so it
    takes no hold): the webhook's own answer, to compare with what the apiserver did."""
    obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    review = review_for(obj, namespace=namespace, dry_run=dry_run)
    uid = review["request"]["uid"]
    ctx = ssl.create_default_context(cafile=str(hook.certs / "ca.crt"))
    with httpx.Client(verify=ctx, timeout=10) as client:
        answer = client.post(f"{hook.url}/{endpoint}?timeout=10s", json=review)
    answer.raise_for_status()
    response = answer.json()["response"]
    assert response["uid"] == uid
    return Answer(response)


def contains(stored: Any, expected: Any, where: str = "") -> list[str]:
    """Where `stored` lacks what `expected` says: every key of an expected map is in the stored
    one with a value that contains it, lists match item by item, scalars are equal. The
    apiserver adds defaults (a probe's periodSeconds, a volume's defaults), never removes."""
    if isinstance(expected, dict):
        if not isinstance(stored, dict):
            return [f"{where}: {stored!r} is not a map"]
        return [p for k, v in expected.items() for p in contains(stored.get(k), v, f"{where}/{k}")]
    if isinstance(expected, list):
        if not isinstance(stored, list) or len(stored) != len(expected):
            return [f"{where}: {stored!r} != {expected!r}"]
        return [
            p
            for i, (s, e) in enumerate(zip(stored, expected, strict=True))
            for p in contains(s, e, f"{where}/{i}")
        ]
    return [] if stored == expected else [f"{where}: stored {stored!r}, expected {expected!r}"]


def kubectl_error(done: subprocess.CompletedProcess[str]) -> str:
    return re.sub(r"\s+", " ", done.stderr).strip()


def deployment(name: str, gpus: int, replicas: int, **spec: Any) -> dict[str, Any]:
    pod = gpu_pod(name, gpus=gpus, **spec)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod["spec"]},
        },
    }


def node(
    name: str, labels: dict[str, str], taints: list[dict[str, str]], gpus: dict[str, str]
) -> dict[str, Any]:
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", **gpus}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", **labels},
        },
        "spec": {"taints": taints},
        "status": {"allocatable": resources, "capacity": resources},
    }
