#!/usr/bin/env python3
"""Load benchmark for gpu-admission: the real server, driven the way the apiserver drives it.

The webhook runs as its own process pinned to core 0 and the load comes from separate client
processes pinned to core 1, over HTTPS with keep-alive, so the numbers are those of one webhook
replica on one core. Every run is compared with a "floor": a bare aiohttp TLS server (same
core, same uvloop, same certificate) that reads the body and returns a fixed answer: what
HTTPS + aiohttp alone cost. "% of floor" is how much of that throughput the webhook keeps
once its own work (decode, rules, patch) is added.

The client and server CPU use of every measured window is read from /proc, so the output says
which side was the bottleneck instead of assuming the server was.

Run from the repository root: `.venv/bin/python bench/load.py [--quick]`. The same file is also
the floor server (`--floor-server PORT CERT KEY`) and the load client (`--client-worker`).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ctypes
import http.client
import os
import platform
import select
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import orjson

REPO = Path(__file__).resolve().parent.parent
SERVER_CORE = 0
CLIENT_CORE = 1
CORES = (SERVER_CORE, CLIENT_CORE)
UID_MARK = "@@UID@@"  # replaced by bytes substitution, so a body is never re-encoded per request
REQUEST_TIMEOUT = 10.0  # the apiserver's ?timeout=10s: the longest a request may take
FLOOR_ANSWER = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview",'
    b'"response":{"uid":"","allowed":true}}'
)
# What the apiserver's webhook client sends (Go adds Accept-Encoding itself; aiohttp does too).
APISERVER_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, */*",
    "User-Agent": "kube-apiserver-admission",
}

# ---------------------------------------------------------------------------------------------
# Realistic AdmissionReviews: what a v1.30 apiserver sends after defaulting and the built-in
# admission plugins (ServiceAccount, DefaultTolerationSeconds, Priority) ran.
# ---------------------------------------------------------------------------------------------

SA_VOLUME_NAME = "kube-api-access-7xq2m"


def _sa_mount() -> dict[str, Any]:
    return {
        "name": SA_VOLUME_NAME,
        "readOnly": True,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    }


def _sa_volume() -> dict[str, Any]:
    """The projected token volume the ServiceAccount admission plugin adds to every pod."""
    return {
        "name": SA_VOLUME_NAME,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": "metadata.namespace",
                                },
                            }
                        ]
                    }
                },
            ],
            "defaultMode": 420,
        },
    }


def _http_probe(path: str, port: int, delay: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port, "scheme": "HTTP"},
        "initialDelaySeconds": delay,
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }


def _container_defaults() -> dict[str, Any]:
    return {
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }


def _vllm_container(*, pod: bool) -> dict[str, Any]:
    mounts = [{"name": "hf-cache", "mountPath": "/root/.cache/huggingface"}]
    if pod:
        mounts.append(_sa_mount())
    return {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.6.3",
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": [
            "--model=meta-llama/Llama-3.1-8B-Instruct",
            "--port=8000",
            "--tensor-parallel-size=1",
            "--gpu-memory-utilization=0.90",
            "--max-model-len=8192",
        ],
        "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
        "env": [
            {"name": "HF_HOME", "value": "/root/.cache/huggingface"},
            {
                "name": "HUGGING_FACE_HUB_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
            },
            {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
            {
                "name": "POD_IP",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
            },
        ],
        "resources": {
            "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
            "requests": {"cpu": "4", "memory": "48Gi"},
        },
        "volumeMounts": mounts,
        "readinessProbe": _http_probe("/health", 8000, 5),
        "livenessProbe": _http_probe("/health", 8000, 15),
        **_container_defaults(),
    }


def _nginx_container() -> dict[str, Any]:
    return {
        "name": "nginx",
        "image": "nginx:1.27.2",
        "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
        "env": [{"name": "NGINX_ENTRYPOINT_QUIET_LOGS", "value": "1"}],
        "resources": {
            "limits": {"memory": "256Mi"},
            "requests": {"cpu": "100m", "memory": "128Mi"},
        },
        "volumeMounts": [
            {"name": "conf", "mountPath": "/etc/nginx/conf.d", "readOnly": True},
            _sa_mount(),
        ],
        "readinessProbe": _http_probe("/", 80, 2),
        "livenessProbe": _http_probe("/", 80, 10),
        **_container_defaults(),
    }


def _pod_spec(
    containers: list[dict[str, Any]], volumes: list[dict[str, Any]], *, pod: bool
) -> dict[str, Any]:
    """Pod-level apiserver defaults; `pod` adds what only admission of a real Pod adds."""
    spec: dict[str, Any] = {
        "volumes": [*volumes, _sa_volume()] if pod else volumes,
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
    }
    if pod:
        spec["tolerations"] = [
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ]
        spec["priority"] = 0
        spec["preemptionPolicy"] = "PreemptLowerPriority"
    return spec


def _vllm_spec(*, pod: bool) -> dict[str, Any]:
    spec = _pod_spec(
        [_vllm_container(pod=pod)],
        [{"name": "hf-cache", "emptyDir": {"sizeLimit": "100Gi"}}],
        pod=pod,
    )
    spec["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    return spec


VLLM_LABELS = {
    "app.kubernetes.io/name": "vllm",
    "app.kubernetes.io/instance": "llama-8b",
    "app.kubernetes.io/component": "model-server",
}
VLLM_ANNOTATIONS = {"prometheus.io/scrape": "true", "prometheus.io/port": "8000"}


def _owner(kind: str, name: str, uid: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "apps/v1",
            "kind": kind,
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def _rs_pod(
    generate_name: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    spec: dict[str, Any],
) -> dict[str, Any]:
    """A Pod as the ReplicaSet controller creates it: generateName, no name yet."""
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": generate_name,
            "namespace": "ml-serving",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": _owner(
                "ReplicaSet", generate_name.rstrip("-"), "5f0c2a7e-3b1d-4c8e-9a61-2d7f4b9e1c03"
            ),
        },
        "spec": spec,
    }


def gpu_pod() -> dict[str, Any]:
    labels = {**VLLM_LABELS, "pod-template-hash": "7c9d8f6b5"}
    return _rs_pod("vllm-llama-8b-7c9d8f6b5-", labels, VLLM_ANNOTATIONS, _vllm_spec(pod=True))


def plain_pod() -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "nginx", "pod-template-hash": "6d4cf56db6"}
    annotations = {"kubectl.kubernetes.io/restartedAt": "2024-11-02T10:14:07Z"}
    spec = _pod_spec(
        [_nginx_container()], [{"name": "conf", "configMap": {"name": "nginx-conf"}}], pod=True
    )
    return _rs_pod("web-6d4cf56db6-", labels, annotations, spec)


def gpu_deployment() -> dict[str, Any]:
    """The Deployment behind gpu_pod(): same container, template defaults only."""
    return {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": "vllm-llama-8b",
            "namespace": "ml-serving",
            "labels": VLLM_LABELS,
            "annotations": {"argocd.argoproj.io/tracking-id": "ml:apps/Deployment:ml-serving/x"},
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": "llama-8b"}},
            "template": {
                "metadata": {"labels": VLLM_LABELS, "annotations": VLLM_ANNOTATIONS},
                "spec": _vllm_spec(pod=False),
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
    }


def review(obj: dict[str, Any], *, user: str, groups: list[str]) -> dict[str, Any]:
    """An admission.k8s.io/v1 CREATE review of `obj`, with UID_MARK where the uid goes."""
    group, _, version = obj["apiVersion"].rpartition("/")
    kind = obj["kind"]
    resource = {"group": group, "version": version, "resource": kind.lower() + "s"}
    gvk = {"group": group, "version": version, "kind": kind}
    meta = obj["metadata"]
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": UID_MARK,
            "kind": gvk,
            "resource": resource,
            "requestKind": gvk,
            "requestResource": resource,
            "name": meta.get("name", ""),
            "namespace": meta["namespace"],
            "operation": "CREATE",
            "userInfo": {
                "username": user,
                "uid": "c1a3e0f2-7d55-4f0e-b8a4-0e6b2f9d1a77",
                "groups": groups,
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


RS_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
SA_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
ARGOCD = "system:serviceaccount:argocd:argocd-application-controller"


@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[], dict[str, Any]]
    user: str
    groups: list[str]
    endpoints: tuple[str, ...]


SCENARIOS = (
    Scenario("gpu-pod", gpu_pod, RS_CONTROLLER, SA_GROUPS, ("mutate", "validate")),
    Scenario("gpu-deployment", gpu_deployment, ARGOCD, SA_GROUPS, ("mutate",)),
    Scenario("plain-pod", plain_pod, RS_CONTROLLER, SA_GROUPS, ("mutate", "validate")),
)


def as_persisted(obj: dict[str, Any], patch_b64: str | None) -> dict[str, Any]:
    """The object a validating webhook sees: mutations applied, name/uid/timestamp assigned.

    The apiserver calls validating webhooks after mutating ones and after generateName and
    uid are filled in, so /validate is benchmarked on that object, not on the raw one.
    """
    import jsonpatch  # a dependency of the webhook itself

    out = orjson.loads(orjson.dumps(obj))
    if patch_b64:
        out = jsonpatch.apply_patch(out, orjson.loads(base64.b64decode(patch_b64)))
    meta = out["metadata"]
    if "generateName" in meta and "name" not in meta:
        meta["name"] = meta["generateName"] + "x7k2p"
    meta.setdefault("uid", "0b6f7a52-9c3e-4d1a-8f25-6e4c1b7d9a30")
    meta.setdefault("creationTimestamp", "2024-11-02T10:14:09Z")
    return out


# ---------------------------------------------------------------------------------------------
# Process plumbing: pinning, /proc sampling, and making sure nothing outlives the run.
# ---------------------------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1


def _pinned(core: int | None) -> Callable[[], None]:
    """preexec_fn: pin the child to `core` and have the kernel SIGTERM it if we die first."""

    def preexec() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return preexec


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all threads) from /proc/<pid>/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # comm may contain spaces: skip past it
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def core_ticks() -> dict[int, list[int]]:
    """Jiffies of CORES from /proc/stat: user nice system idle iowait irq softirq steal."""
    out: dict[int, list[int]] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *vals = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in CORES:
            out[int(name[3:])] = [int(v) for v in vals[:8]]
    return out


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds of our processes and jiffies of our cores at one instant."""

    at: float
    procs: dict[int, float]
    cores: dict[int, list[int]]

    @classmethod
    def take(cls, pids: list[int]) -> CpuSnapshot:
        procs = {}
        for pid in pids:
            with contextlib.suppress(OSError, ValueError, IndexError):
                procs[pid] = cpu_seconds(pid)
        return cls(time.monotonic(), procs, core_ticks())

    def used(self, later: CpuSnapshot, pid: int) -> float:
        """% of one core that `pid` used between the two snapshots."""
        if pid not in self.procs or pid not in later.procs:
            return 0.0
        return 100 * (later.procs[pid] - self.procs[pid]) / (later.at - self.at)

    def other(self, later: CpuSnapshot) -> float:
        """% of one core used on CORES by processes not in `procs` (ours), softirq excluded.

        Jiffies are 10 ms ticks, so this is approximate; it exists because a shared machine
        (someone running the test suite) silently halves the numbers otherwise.
        """
        ticks = sum(
            sum(later.cores[c][:3]) - sum(self.cores[c][:3]) for c in self.cores if c in later.cores
        )
        ours = sum(later.procs[p] - self.procs[p] for p in self.procs if p in later.procs)
        return max(0.0, 100 * (ticks / CLK_TCK - ours) / (later.at - self.at))

    def cores_usage(self, later: CpuSnapshot) -> dict[int, tuple[float, float, float]]:
        """Per core: (busy, idle, steal) percentages."""
        out = {}
        for c, before in self.cores.items():
            if c not in later.cores:
                continue
            d = [b - a for a, b in zip(before, later.cores[c], strict=True)]
            total = sum(d) or 1
            idle, steal = d[3] + d[4], d[7]
            out[c] = (100 * (total - idle - steal) / total, 100 * idle / total, 100 * steal / total)
        return out


def wait_quiet(ours: list[int], limit: float) -> float:
    """Wait (up to `limit` s) until other processes use < 5% of a core; return what they use."""
    deadline = time.monotonic() + limit
    announced = False
    while True:
        a = CpuSnapshot.take(ours)
        time.sleep(0.5)
        other = a.other(CpuSnapshot.take(ours))
        if other < 5 or time.monotonic() >= deadline:
            return other
        if not announced:
            print(f"      (other processes use {other:.0f}% of a core: waiting up to {limit:g} s)")
            announced = True


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Processes:
    """Every child we start, so one `finally` can stop all of them."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, cmd: list[str], core: int | None, **kw: Any) -> subprocess.Popen[bytes]:
        # Own session: Ctrl-C reaches only us, and `finally` stops children in order.
        proc = subprocess.Popen(
            cmd, preexec_fn=_pinned(core), cwd=REPO, start_new_session=True, **kw
        )
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(ValueError):
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc)


def _read_line(stream: IO[bytes], timeout: float) -> bytes:
    """One line from a child's stdout, or TimeoutError: a stuck child must not hang the run."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        raise TimeoutError(f"no output from a child process within {timeout:.0f}s")
    return stream.readline()


def _ssl_client_context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def wait_healthy(proc: subprocess.Popen[bytes], port: int, ca: Path, stderr: Path) -> None:
    deadline = time.monotonic() + 20
    ctx = _ssl_client_context(ca)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"server exited with {proc.returncode} before /healthz:\n{tail(stderr)}"
            )
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=1)
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.05)
    raise RuntimeError(f"server on port {port} not healthy after 20s:\n{tail(stderr)}")


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no stderr captured)"
    return "\n".join(text[-lines:]) or "(stderr is empty)"


def post_once(port: int, ca: Path, path: str, body: bytes) -> tuple[int, bytes]:
    """One request outside the load, to check a scenario and show what the webhook answers."""
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, context=_ssl_client_context(ca), timeout=REQUEST_TIMEOUT
    )
    try:
        conn.request("POST", path, body=body, headers=APISERVER_HEADERS)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------
# The floor server and the load client: modes of this same file, run as child processes.
# ---------------------------------------------------------------------------------------------


def run_floor_server(port: int, cert: str, key: str) -> int:
    """Bare aiohttp over TLS on uvloop: read the body, answer a constant. Nothing else."""
    import uvloop
    from aiohttp import web

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=FLOOR_ANSWER, content_type="application/json")

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/mutate", answer)
    app.router.add_post("/validate", answer)
    app.router.add_get("/healthz", healthz)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    web.run_app(
        app,
        host="127.0.0.1",
        port=port,
        ssl_context=ctx,
        access_log=None,
        print=None,
        loop=uvloop.new_event_loop(),
    )
    return 0


Send = Callable[[bytes], Awaitable[tuple[int, bytes]]]


class RawConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection, request/response in lock-step (no pipelining).

    `--client raw`: the same request line, headers and body as the aiohttp client, for a
    fraction of its CPU, so the floor is measured where the aiohttp client saturates first.
    Responses must carry Content-Length (aiohttp's web.Response always does).
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is duck-typed

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None or self.waiter.done():
            return
        head = bytes(self.buf[:end]).lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            self.waiter.set_exception(ConnectionError("response without Content-Length"))
            return
        stop = head.find(b"\r\n", at + 2)  # "\r\ncontent-length:" is 17 bytes
        length = int(head[at + 17 : stop if stop >= 0 else None])
        if len(self.buf) < end + 4 + length:
            return
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        self.waiter.set_result((int(head[9:12]), body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionError("server closed the connection"))

    async def request(self, data: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.transport.write(data)
        timer = loop.call_later(REQUEST_TIMEOUT, self.waiter.cancel)
        try:
            return await self.waiter
        except asyncio.CancelledError:
            raise TimeoutError(f"no response within {REQUEST_TIMEOUT:g} s") from None
        finally:
            timer.cancel()


def _raw_sender(port: int, ctx: ssl.SSLContext, prefix: bytes, suffix: bytes) -> Send:
    """A `Send` over its own RawConnection, reconnecting when the server closes it."""
    conn: RawConnection | None = None

    async def send(uid: bytes) -> tuple[int, bytes]:
        nonlocal conn
        if conn is None or conn.transport is None:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(
                RawConnection, "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"
            )
        try:
            return await conn.request(prefix + uid + suffix)
        except BaseException:
            if conn.transport is not None:
                conn.transport.abort()
            conn = None
            raise

    return send


async def _drive(spec: dict[str, Any], t_start: float, t_end: float) -> dict[str, Any]:
    """N workers, each on one keep-alive connection; requests ending in [t_start, t_end) count.

    Lean on purpose (pre-encoded body halves, uid spliced in as bytes, no cookie jar, orjson):
    the client shares the machine with the server and must not be the thing measured.
    """
    import aiohttp

    head, tail_ = spec["body"].encode().split(UID_MARK.encode())
    port: int = spec["port"]
    path: str = spec["path"]
    check_uid: bool = spec["check_uid"]
    cap: int = spec["max_requests"]
    tag: int = spec["tag"]
    concurrency: int = spec["concurrency"]
    ctx = _ssl_client_context(Path(spec["ca"]))
    clock = time.monotonic
    latencies = array("d")
    state = {"issued": 0, "ok": 0, "errors": 0}
    samples: list[dict[str, Any]] = []

    def error(kind: str, uid: str, **detail: Any) -> None:
        state["errors"] += 1
        if len(samples) < 5:
            samples.append({"kind": kind, "uid": uid, **detail})

    async def worker(w: int, send: Send) -> None:
        n = 0
        while state["issued"] < cap and clock() < t_end:
            state["issued"] += 1
            n += 1
            uid = b"%08x-%04x-4000-8000-%012x" % (tag, w, n)
            t0 = clock()
            try:
                status, data = await send(uid)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                error("exception", uid.decode(), error=repr(exc))
                continue
            t1 = clock()
            if status != 200:
                error("status", uid.decode(), status=status, body=data[:500].decode("replace"))
                continue
            if check_uid:
                try:
                    echoed = orjson.loads(data)["response"]["uid"]
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    echoed = None
                if echoed != uid.decode():
                    error("uid", uid.decode(), echoed=echoed, body=data[:500].decode("replace"))
                    continue
            if t_start <= t1 < t_end:
                state["ok"] += 1
                latencies.append(t1 - t0)

    if spec["client"] == "raw":
        length = len(head) + len(tail_) + len(b"%08x-%04x-4000-8000-%012x" % (0, 0, 0))
        headers = "".join(f"{k}: {v}\r\n" for k, v in APISERVER_HEADERS.items())
        prefix = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}"
            f"Accept-Encoding: gzip\r\nContent-Length: {length}\r\n\r\n"
        ).encode() + head
        senders = [_raw_sender(port, ctx, prefix, tail_) for _ in range(concurrency)]
        await asyncio.gather(*(worker(w, s) for w, s in enumerate(senders)))
    else:
        url = f"https://127.0.0.1:{port}{path}"
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency, ssl=ctx),
            headers=APISERVER_HEADERS,
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT),
            cookie_jar=aiohttp.DummyCookieJar(),
        ) as session:

            async def send(uid: bytes) -> tuple[int, bytes]:
                async with session.post(url, data=head + uid + tail_) as resp:
                    return resp.status, await resp.read()

            await asyncio.gather(*(worker(w, send) for w in range(concurrency)))
    return {
        "ok": state["ok"],
        "errors": state["errors"],
        "issued": state["issued"],
        "finished": clock(),
        "samples": samples,
        "latencies_us": [round(x * 1e6) for x in latencies],
    }


def run_client_worker() -> int:
    """Protocol on stdin/stdout: spec JSON -> "ready"; "go T_START T_END" -> result JSON."""
    import uvloop

    spec = orjson.loads(sys.stdin.buffer.readline())
    import aiohttp  # noqa: F401 - imported before "ready" so its import time is not measured

    sys.stdout.write("ready\n")
    sys.stdout.flush()
    go = sys.stdin.buffer.readline().split()
    if not go or go[0] != b"go":
        return 1
    result = uvloop.run(_drive(spec, float(go[1]), float(go[2])))
    sys.stdout.buffer.write(orjson.dumps(result) + b"\n")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------------------------------------
# The orchestrator.
# ---------------------------------------------------------------------------------------------


@dataclass
class Result:
    scenario: str
    endpoint: str
    concurrency: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    rss_mb: float
    server_cpu: float
    client_cpu: float
    other_cpu: float
    cores: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    floor: Result | None = None  # the floor run at the same concurrency
    capped: bool = False

    @property
    def client_bound(self) -> bool:
        return self.client_cpu >= 90 and self.server_cpu < 90

    @property
    def contended(self) -> bool:
        return self.other_cpu >= 10

    @property
    def bottleneck(self) -> str:
        if self.server_cpu >= 90:
            label = "server-bound"
        elif self.client_cpu >= 90:
            label = "CLIENT-BOUND"
        elif self.contended:
            return "CONTENDED: other processes took the cores"
        else:
            label = "neither saturated"
        return label + (", CONTENDED" if self.contended else "")

    @property
    def pct_floor(self) -> str:
        """Share of the floor's req/s; "≤" when the floor was client-bound (really higher)."""
        if self.scenario == "floor":
            return "100%"
        if self.floor is None or not self.floor.rps:
            return "n/a"
        bound = "≤ " if self.floor.client_bound else ""
        return f"{bound}{100 * self.rps / self.floor.rps:.0f}%"


def percentile(sorted_values: list[int], q: float) -> float:
    """Nearest-rank percentile, in ms, of latencies in µs."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1] / 1000


@dataclass
class Bench:
    args: argparse.Namespace
    ca: Path
    procs: Processes
    client_core: int | None
    tag: int = 0

    def run(
        self,
        server: subprocess.Popen[bytes],
        port: int,
        scenario: str,
        endpoint: str,
        body: bytes,
        concurrency: int,
        *,
        check_uid: bool,
    ) -> Result:
        """One timed run: start the clients, sample /proc at window edges, merge results."""
        if self.args.settle > 0:
            wait_quiet([p.pid for p in self.procs.procs] + [os.getpid()], self.args.settle)
        nclients = min(self.args.clients, concurrency)
        shares = [concurrency // nclients + (i < concurrency % nclients) for i in range(nclients)]
        clients = []
        for share in shares:
            self.tag += 1
            spec = {
                "port": port,
                "path": f"/{endpoint}?timeout=10s",
                "client": self.args.client,
                "ca": str(self.ca),
                "body": body.decode(),
                "check_uid": check_uid,
                "concurrency": share,
                "max_requests": self.args.max_requests // nclients,
                "tag": self.tag,
            }
            proc = self.procs.start(
                [sys.executable, str(Path(__file__).resolve()), "--client-worker"],
                self.client_core,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(orjson.dumps(spec) + b"\n")
            proc.stdin.flush()
            clients.append(proc)
        try:
            for proc in clients:
                assert proc.stdout is not None
                if _read_line(proc.stdout, 30).strip() != b"ready":
                    raise RuntimeError("load client failed to start")
            t_start = time.monotonic() + self.args.warmup
            t_end = t_start + self.args.duration
            for proc in clients:
                assert proc.stdin is not None
                proc.stdin.write(f"go {t_start!r} {t_end!r}\n".encode())
                proc.stdin.flush()
            ours = [server.pid, *(p.pid for p in clients)]
            ours += [p.pid for p in self.procs.procs if p.pid not in ours] + [os.getpid()]
            time.sleep(max(0.0, t_start - time.monotonic()))
            before = CpuSnapshot.take(ours)
            time.sleep(max(0.0, t_end - time.monotonic()))
            after = CpuSnapshot.take(ours)
            outs = []
            for proc in clients:
                assert proc.stdout is not None
                line = _read_line(proc.stdout, REQUEST_TIMEOUT + 20)
                if not line:
                    raise RuntimeError("load client died without a result")
                outs.append(orjson.loads(line))
        finally:
            for proc in clients:
                self.procs.stop(proc)
        lat = sorted(x for o in outs for x in o["latencies_us"])
        window = min(t_end, max(o["finished"] for o in outs)) - t_start
        return Result(
            scenario=scenario,
            endpoint=endpoint,
            concurrency=concurrency,
            rps=sum(o["ok"] for o in outs) / window if window > 0 else 0.0,
            p50_ms=percentile(lat, 0.50),
            p99_ms=percentile(lat, 0.99),
            errors=sum(o["errors"] for o in outs),
            rss_mb=rss_mb(server.pid),
            server_cpu=before.used(after, server.pid),
            client_cpu=sum(before.used(after, p.pid) for p in clients),
            other_cpu=before.other(after),
            cores=before.cores_usage(after),
            samples=[s for o in outs for s in o["samples"]],
            capped=any(o["issued"] >= spec["max_requests"] for o in outs),
        )


def report_line(r: Result) -> str:
    cores = ", ".join(
        f"core {c} busy {b:.0f}% idle {i:.0f}% steal {st:.0f}%"
        for c, (b, i, st) in sorted(r.cores.items())
    )
    return (
        f"  {r.scenario:<15} {r.endpoint:<9} c={r.concurrency:<3} {r.rps:7.0f} req/s  "
        f"p50 {r.p50_ms:6.2f} ms  p99 {r.p99_ms:6.2f} ms  errors {r.errors}  "
        f"RSS {r.rss_mb:.1f} MB"
        + (f"  {r.pct_floor} of floor" if r.floor else "")
        + ("  STOPPED by --max-requests before the window ended" if r.capped else "")
        + "\n"
        f"      cpu: server {r.server_cpu:.0f}%, client {r.client_cpu:.0f}%, "
        f"other processes {r.other_cpu:.0f}% -> {r.bottleneck}  ({cores})"
    )


def markdown(results: list[Result]) -> str:
    head = ["scenario", "endpoint", "concurrency", "req/s", "p50 ms", "p99 ms"]
    head += ["% of floor", "RSS MB"]
    rows = [
        [
            r.scenario,
            r.endpoint if r.scenario != "floor" else "(bare aiohttp)",
            str(r.concurrency),
            ("≥ " if r.scenario == "floor" and r.client_bound else "")
            + f"{r.rps:.0f}"
            + ("*" if r.contended or r.capped else ""),
            f"{r.p50_ms:.2f}",
            f"{r.p99_ms:.2f}",
            r.pct_floor,
            f"{r.rss_mb:.1f}",
        ]
        for r in results
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    numeric = {2, 3, 4, 5, 6, 7}

    def fmt(cells: list[str]) -> str:
        padded = [
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = [("-" * (w - 1) + ":") if i in numeric else "-" * w for i, w in enumerate(widths)]
    lines = [fmt(head), "| " + " | ".join(rule) + " |", *(fmt(r) for r in rows)]
    if any(r.scenario == "floor" and r.client_bound for r in results):
        lines.append(
            "\n≥ / ≤: the load client saturated its core before the floor server did, so the "
            "real floor is higher and the webhook's share of it lower (try `--client raw`)."
        )
    if any(r.contended or r.capped for r in results):
        lines.append(
            "\n*: other processes used ≥ 10% of a core during the run, or it hit --max-requests."
        )
    return "\n".join(lines)


def summary(results: list[Result]) -> str:
    """Which side limited the numbers, so nobody quotes a client-bound or contended run."""

    def span(values: list[float]) -> str:
        return f"{min(values):.0f}-{max(values):.0f}%"

    lines = []
    for label, group in (
        ("webhook", [r for r in results if r.scenario != "floor"]),
        ("floor", [r for r in results if r.scenario == "floor"]),
    ):
        if not group:
            continue
        server = span([r.server_cpu for r in group])
        client = span([r.client_cpu for r in group])
        other = span([r.other_cpu for r in group])
        verdicts = "; ".join(sorted({r.bottleneck for r in group}))
        lines.append(
            f"CPU in the measured windows, {label} runs: server {server}, client {client} of "
            f"their own cores, other processes {other} of a core -> {verdicts}"
        )
    if any(r.scenario == "floor" and r.client_bound for r in results):
        lines.append(
            "Note: the floor runs were client-bound, so the floor is a lower bound and "
            '"% of floor" overstates the webhook\'s share of it.'
        )
    contended = [r for r in results if r.contended]
    if contended:
        lines.append(
            f"WARNING: {len(contended)} run(s) shared the cores with other processes (up to "
            f"{max(r.other_cpu for r in contended):.0f}% of a core); rerun on a quiet machine."
        )
    return "\n".join(lines)


def command_line() -> str:
    exe = Path(sys.executable)
    with contextlib.suppress(ValueError):
        exe = exe.relative_to(Path.cwd())
    return shlex.join([str(exe), *sys.argv])


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (
        f"{model}, {os.cpu_count()} cores, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def preflight(
    port: int, ca: Path, stderr: Path, scenarios: list[Scenario]
) -> Iterator[tuple[Scenario, str, bytes, dict[str, Any]]]:
    """Check every scenario once and yield (scenario, endpoint, body template, answer).

    The /validate body carries the object as mutated by this very webhook, as the apiserver
    would send it.
    """
    for sc in scenarios:
        obj = sc.build()
        patch = None
        for endpoint in sc.endpoints:
            target = obj if endpoint == "mutate" else as_persisted(obj, patch)
            template = orjson.dumps(review(target, user=sc.user, groups=sc.groups))
            uid = "00000000-0000-4000-8000-preflight000"
            status, data = post_once(
                port,
                ca,
                f"/{endpoint}?timeout=10s",
                template.replace(UID_MARK.encode(), uid.encode()),
            )
            answer: dict[str, Any] = {}
            with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
                answer = orjson.loads(data).get("response") or {}
            if status != 200 or answer.get("uid") != uid:
                print(
                    f"!! {endpoint} {sc.name}: HTTP {status}, body {data[:500]!r}\n"
                    f"   request ({len(template)} bytes, uid {uid}):\n{template.decode()}\n"
                    f"   server stderr:\n{tail(stderr)}",
                    file=sys.stderr,
                )
            if endpoint == "mutate":
                patch = answer.get("patch")
            yield sc, endpoint, template, answer


def describe(answer: dict[str, Any]) -> str:
    parts = ["allowed" if answer.get("allowed") else "DENIED"]
    if answer.get("patch"):
        ops = orjson.loads(base64.b64decode(answer["patch"]))
        parts.append(f"{len(ops)} patch ops ({', '.join(sorted({o['path'] for o in ops}))})")
    if answer.get("warnings"):
        parts.append(f"{len(answer['warnings'])} warnings")
    if answer.get("status", {}).get("message"):
        parts.append("message: " + answer["status"]["message"].replace("\n", " / ")[:160])
    return "; ".join(parts)


def run_bench(args: argparse.Namespace) -> int:
    procs = Processes()
    cores = os.sched_getaffinity(0)
    pin = {SERVER_CORE, CLIENT_CORE} <= cores
    if not pin:
        print(f"warning: cores {SERVER_CORE},{CLIENT_CORE} not both available: not pinning")
    bin_dir = Path(sys.executable).parent
    cli = bin_dir / "gpu-admission"
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="gpu-admission-bench-") as tmp_s:
        tmp = Path(tmp_s)
        try:
            subprocess.run(
                [
                    cli,
                    "certs",
                    "generate",
                    "--out",
                    tmp / "certs",
                    "--hosts",
                    "localhost,127.0.0.1",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            ca, cert, key = (tmp / "certs" / n for n in ("ca.crt", "tls.crt", "tls.key"))
            bench = Bench(args, ca, procs, CLIENT_CORE if pin else None)
            server_core = SERVER_CORE if pin else None

            floor_port, hook_port = free_port(), free_port()
            floor_err, hook_err = tmp / "floor.stderr", tmp / "webhook.stderr"
            with floor_err.open("wb") as f_err, hook_err.open("wb") as h_err:
                floor = procs.start(
                    [sys.executable, str(Path(__file__).resolve()), "--floor-server",
                     str(floor_port), str(cert), str(key)],
                    server_core,
                    stderr=f_err,
                    stdout=subprocess.DEVNULL,
                )  # fmt: skip
                hook = procs.start(
                    [cli, "serve", "--host", "127.0.0.1", "--port", str(hook_port),
                     "--cert", str(cert), "--key", str(key), "--rules", str(args.rules)],
                    server_core,
                    stderr=h_err,
                    stdout=subprocess.DEVNULL,
                )  # fmt: skip
            wait_healthy(floor, floor_port, ca, floor_err)
            wait_healthy(hook, hook_port, ca, hook_err)

            print(f"gpu-admission load benchmark — {machine()}")
            print(
                f"server pinned to core {server_core}, {args.clients} {args.client} client "
                f"process(es) pinned to core {bench.client_core}; {args.warmup:g} s warm-up + "
                f"{args.duration:g} s per run, at most {args.max_requests} requests per run\n"
            )
            chosen = [sc for sc in SCENARIOS if not args.scenario or sc.name in args.scenario]
            print("Preflight (one request each; what the webhook answers):")
            runs = []
            for sc, endpoint, template, answer in preflight(hook_port, ca, hook_err, chosen):
                print(f"  {endpoint:<8} {sc.name:<15} {len(template):5d} B  {describe(answer)}")
                runs.append((sc.name, endpoint, template))
            print()

            # The floor reads the same bytes as the GPU pod /mutate run, whatever is selected.
            floor_body = orjson.dumps(review(gpu_pod(), user=RS_CONTROLLER, groups=SA_GROUPS))
            for concurrency in args.concurrency:
                print(f"Concurrency {concurrency}:")
                fr = bench.run(
                    floor, floor_port, "floor", "mutate", floor_body, concurrency, check_uid=False
                )
                print(report_line(fr))
                results.append(fr)
                for name, endpoint, template in runs:
                    r = bench.run(
                        hook, hook_port, name, endpoint, template, concurrency, check_uid=True
                    )
                    r.floor = fr
                    print(report_line(r))
                    results.append(r)
                    if r.errors or hook.poll() is not None:
                        print(f"!! {r.errors} failed requests on {endpoint} {name}; first ones:")
                        for s in r.samples:
                            print(f"   {s}")
                        print(f"   request template (uid at {UID_MARK}):\n{template.decode()}")
                        print(f"   webhook stderr (last lines):\n{tail(hook_err)}")
                    if hook.poll() is not None:
                        raise RuntimeError(f"webhook exited with {hook.returncode}")
                print()
        except KeyboardInterrupt:
            print("\ninterrupted; stopping every child process", file=sys.stderr)
            return 130
        finally:
            procs.stop_all()

    print(markdown(results))
    print()
    print(f"Command: `{command_line()}` ({machine()})")
    print(summary(results))
    return 1 if any(r.errors for r in results) else 0


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # so `finally` stops the children on `kill <pid>` too


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Benchmark gpu-admission against a bare aiohttp TLS floor (2+ cores)."
    )
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64], help="default: 16 64")
    p.add_argument("--duration", type=float, help="measured seconds per run (default 10)")
    p.add_argument("--warmup", type=float, default=1.0, help="uncounted seconds before each run")
    p.add_argument("--quick", action="store_true", help="3 s runs instead of 10 s")
    p.add_argument(
        "--max-requests",
        type=int,
        default=1_000_000,
        help="hard cap on requests per run, warm-up included (default 1000000)",
    )
    p.add_argument(
        "--clients",
        type=int,
        default=1,
        help=f"load client processes, all pinned to core {CLIENT_CORE} (default 1)",
    )
    p.add_argument(
        "--scenario",
        action="append",
        choices=[sc.name for sc in SCENARIOS],
        help="run only this scenario (repeatable; default: all)",
    )
    p.add_argument(
        "--client",
        choices=["aiohttp", "raw"],
        default="raw",
        help="a minimal HTTP/1.1 keep-alive client (default; the aiohttp client cannot saturate "
        "the floor on one core) or an aiohttp ClientSession",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=30.0,
        help="before each run, wait up to this many seconds for other processes to go quiet",
    )
    p.add_argument("--rules", type=Path, default=REPO / "rules", help="rules folder to serve")
    p.add_argument(
        "--floor-server", nargs=3, metavar=("PORT", "CERT", "KEY"), help=argparse.SUPPRESS
    )
    p.add_argument("--client-worker", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.floor_server:
        port, cert, key = args.floor_server
        return run_floor_server(int(port), cert, key)
    if args.client_worker:
        return run_client_worker()
    if args.duration is None:
        args.duration = 3.0 if args.quick else 10.0
    signal.signal(signal.SIGTERM, _sigterm)
    return run_bench(args)


if __name__ == "__main__":
    sys.exit(main())
