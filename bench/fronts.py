#!/usr/bin/env python3
"""Two HTTP fronts for the same review pipeline, side by side: the webhook's own HTTP/1.1
layer (`gpu-admission serve`) and aiohttp's low-level server, both on one pinned core.

What is compared is the server CPU per admitted GPU pod, as the apiserver admits one: a
`/mutate` review, then a `/validate` review of the mutated object, on keep-alive connections;
every pod has a name and a namespace of its own, against the example cluster snapshot with GPU
holds on (each admitted pod adds a hold). Both fronts run the same handler: decode, the engine
(`engine.admit`), encode, metrics, the hold; the aiohttp front hands it the body and answers
with its prepared bytes (no router, no middlewares, no access log, uvloop, the same TLS
context and the same start-up: rules, snapshot, holds, GC settings).

Run from the repository root, against the compiled engine as the image ships it:

    make compiled
    PYTHONSAFEPATH=1 PYTHONPATH=build/compiled .venv/bin/python bench/fronts.py

The fronts take turns (`--rounds`), so a neighbour's load on the machine falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from children import Processes, free_port, read_line, tail, wait_healthy  # noqa: E402
from clients import (  # noqa: E402
    APISERVER_HEADERS,
    REQUEST_TIMEOUT,
    RawConnection,
    post_once,
    ssl_client_context,
)
from cpustat import CLIENT_CORE, SERVER_CORE, CpuSnapshot, rss_mb, wait_quiet  # noqa: E402
from report import machine, percentile  # noqa: E402
from reviews import RS_CONTROLLER, SA_GROUPS, UID_MARK, as_persisted, gpu_pod_unique, review  # noqa: E402

REPO = HERE.parent
SNAPSHOT = REPO / "examples" / "cluster-snapshot.yaml"


# --- the aiohttp front -------------------------------------------------------------------------


def run_aiohttp_front(port: int, cert: str, key: str, rules: str, snapshot: str) -> int:
    """The webhook's routes behind aiohttp's low-level server, set up as `serve` sets up."""
    import gc

    import uvloop
    from aiohttp import web

    from webhook.facts.sources import cluster_source
    from webhook.server.app import hold_expirer, make_app
    from webhook.server.http.routes import Answer, Request
    from webhook.server.http.state import ServerState
    from webhook.server.http.tls import make_ssl_context
    from webhook.server.process import map_large_buffers
    from webhook.server.reload import RuleHolder

    holder = RuleHolder(source=Path(rules))
    assert holder.refresh(), "rules did not load"
    ctx = make_ssl_context(Path(cert), Path(key))
    source = cluster_source(snapshot=Path(snapshot))
    map_large_buffers()
    routes = make_app(holder, source, state=ServerState(), probes=False)
    handlers = {
        "/mutate": routes.find("POST", "/mutate"),
        "/validate": routes.find("POST", "/validate"),
    }
    healthy = web.Response(body=b"ok", content_type="text/plain")

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        route = handlers.get(request.path) if request.method == "POST" else None
        if route is None or isinstance(route, Answer):
            return healthy if request.path == "/healthz" else web.Response(status=404)
        body = await request.read()
        answer = route(Request("POST", request.path, body))
        return web.Response(
            status=answer.status, body=answer.body, headers={"Content-Type": answer.content_type}
        )

    async def main() -> None:
        assert source.reservations is not None
        expirer = hold_expirer(source.reservations)()
        await expirer.__anext__()
        server = web.Server(handle, access_log=None)
        loop = asyncio.get_running_loop()
        await loop.create_server(server, "127.0.0.1", port, ssl=ctx, backlog=1024)
        await asyncio.Event().wait()

    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
    return 0


# --- the load: one admitted GPU pod = /mutate then /validate ---------------------------------


async def _drive(spec: dict[str, Any], t_start: float, t_end: float) -> dict[str, Any]:
    port: int = spec["port"]
    ctx = ssl_client_context(Path(spec["ca"]))
    headers = "".join(f"{k}: {v}\r\n" for k, v in APISERVER_HEADERS.items())
    uid_length = len(b"%08x-%04x-4000-8000-%012x" % (0, 0, 0))

    def framed(endpoint: str, template: str) -> list[bytes]:
        parts = template.encode().split(UID_MARK.encode())
        length = sum(map(len, parts)) + uid_length * (len(parts) - 1)
        prefix = (
            f"POST /{endpoint}?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}"
            f"Accept-Encoding: gzip\r\nContent-Length: {length}\r\n\r\n"
        ).encode()
        return [prefix + parts[0], *parts[1:]]

    mutate, validate = framed("mutate", spec["mutate"]), framed("validate", spec["validate"])
    clock = time.monotonic
    requests, pods = array("d"), array("d")
    state = {"pods": 0, "errors": 0}
    samples: list[str] = []

    def check(status: int, data: bytes, uid: bytes, endpoint: str) -> bool:
        try:
            answer = orjson.loads(data)["response"]
            good = status == 200 and answer["uid"] == uid.decode() and answer["allowed"]
            good = good and (endpoint == "validate" or bool(answer.get("patch")))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            good = False
        if not good:
            state["errors"] += 1
            if len(samples) < 5:
                samples.append(f"{endpoint} {status} {data[:300]!r}")
        return good

    async def worker(w: int) -> None:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            RawConnection, "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"
        )
        n = 0
        while clock() < t_end:
            n += 1
            uid = b"%08x-%04x-4000-8000-%012x" % (spec["tag"], w, n)
            t0 = clock()
            status, data = await conn.request(uid.join(mutate))
            t1 = clock()
            if not check(status, data, uid, "mutate"):
                continue
            status, data = await conn.request(uid.join(validate))
            t2 = clock()
            if not check(status, data, uid, "validate"):
                continue
            if t_start <= t2 < t_end:
                state["pods"] += 1
                pods.append(t2 - t0)
                requests.append(t2 - t1)
                if t1 >= t_start:
                    requests.append(t1 - t0)
        if conn.transport is not None:
            conn.transport.close()

    await asyncio.gather(*(worker(w) for w in range(spec["concurrency"])))
    return {
        "pods": state["pods"],
        "errors": state["errors"],
        "samples": samples,
        "requests_us": [round(x * 1e6) for x in requests],
        "pods_us": [round(x * 1e6) for x in pods],
    }


def run_client_worker() -> int:
    """stdin: spec JSON -> "ready"; "go T_START T_END" -> result JSON on stdout."""
    import uvloop

    spec = orjson.loads(sys.stdin.buffer.readline())
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    go = sys.stdin.buffer.readline().split()
    if not go or go[0] != b"go":
        return 1
    result = uvloop.run(_drive(spec, float(go[1]), float(go[2])))
    sys.stdout.buffer.write(orjson.dumps(result) + b"\n")
    sys.stdout.flush()
    return 0


# --- orchestration -----------------------------------------------------------------------------


def _templates(port: int, ca: Path) -> tuple[str, str]:
    """The /mutate review and, from this very server's patch, the /validate review of the
    mutated object, with UID_MARK where each pod's uid, name and namespace go."""
    obj = gpu_pod_unique()
    mutate = orjson.dumps(review(obj, user=RS_CONTROLLER, groups=SA_GROUPS)).decode()
    uid = "00000000-0000-4000-8000-preflight000"
    status, data = post_once(
        port, ca, "/mutate?timeout=10s", mutate.replace(UID_MARK, uid).encode()
    )
    answer = orjson.loads(data)["response"] if status == 200 else {}
    if not answer.get("allowed") or not answer.get("patch"):
        raise RuntimeError(f"preflight /mutate on port {port}: HTTP {status} {data[:500]!r}")
    persisted = as_persisted(obj, answer["patch"])
    validate = orjson.dumps(review(persisted, user=RS_CONTROLLER, groups=SA_GROUPS)).decode()
    return mutate, validate


def measure(
    args: argparse.Namespace,
    procs: Processes,
    server: subprocess.Popen[bytes],
    port: int,
    ca: Path,
    templates: tuple[str, str],
    tag: int,
    core: int | None,
) -> dict[str, Any]:
    if args.settle > 0:
        wait_quiet([p.pid for p in procs.procs] + [os.getpid()], args.settle)
    spec = {
        "port": port,
        "ca": str(ca),
        "mutate": templates[0],
        "validate": templates[1],
        "concurrency": args.concurrency,
        "tag": tag,
    }
    client = procs.start(
        [sys.executable, str(Path(__file__).resolve()), "--client-worker"],
        core,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert client.stdin is not None and client.stdout is not None
    try:
        client.stdin.write(orjson.dumps(spec) + b"\n")
        client.stdin.flush()
        if read_line(client.stdout, 30).strip() != b"ready":
            raise RuntimeError("load client failed to start")
        t_start = time.monotonic() + args.warmup
        t_end = t_start + args.duration
        client.stdin.write(f"go {t_start!r} {t_end!r}\n".encode())
        client.stdin.flush()
        time.sleep(max(0.0, t_start - time.monotonic()))
        before = CpuSnapshot.take([server.pid, client.pid])
        time.sleep(max(0.0, t_end - time.monotonic()))
        after = CpuSnapshot.take([server.pid, client.pid])
        out = orjson.loads(read_line(client.stdout, REQUEST_TIMEOUT + 30))
    finally:
        procs.stop(client)
    window = after.at - before.at
    server_cpu = before.used(after, server.pid) / 100 * window  # CPU seconds
    return {
        "pods": out["pods"],
        "errors": out["errors"],
        "samples": out["samples"],
        "pods_per_s": out["pods"] / args.duration,
        "cpu_us_per_pod": 1e6 * server_cpu / max(out["pods"], 1),
        "server_busy": before.used(after, server.pid),
        "client_busy": before.used(after, client.pid),
        "other": before.other(after),
        "req_p50": percentile(sorted(out["requests_us"]), 0.50),
        "req_p99": percentile(sorted(out["requests_us"]), 0.99),
        "pod_p99": percentile(sorted(out["pods_us"]), 0.99),
        "rss": rss_mb(server.pid),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--concurrency", type=int, default=16, help="connections (default 16)")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=2.0, help="uncounted seconds before each run")
    p.add_argument("--rounds", type=int, default=3, help="runs per front, taking turns")
    p.add_argument("--settle", type=float, default=10.0, help="wait up to this for quiet cores")
    p.add_argument("--rules", type=Path, default=REPO / "rules")
    p.add_argument("--aiohttp-front", nargs=5, help=argparse.SUPPRESS)
    p.add_argument("--client-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.aiohttp_front:
        port, cert, key, rules, snapshot = args.aiohttp_front
        return run_aiohttp_front(int(port), cert, key, rules, snapshot)
    if args.client_worker:
        return run_client_worker()

    procs = Processes()
    pin = {SERVER_CORE, CLIENT_CORE} <= os.sched_getaffinity(0)
    server_core, client_core = (SERVER_CORE, CLIENT_CORE) if pin else (None, None)
    cli = Path(sys.executable).parent / "gpu-admission"
    with tempfile.TemporaryDirectory(prefix="gpu-admission-fronts-") as tmp_s:
        tmp = Path(tmp_s)
        try:
            subprocess.run(
                [cli, "certs", "generate", "--out", tmp / "certs", "--hosts", "127.0.0.1"],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            ca, cert, key = (tmp / "certs" / n for n in ("ca.crt", "tls.crt", "tls.key"))
            fronts: dict[str, tuple[subprocess.Popen[bytes], int, Path]] = {}
            own_port, aio_port = free_port(), free_port()
            with (tmp / "own.err").open("wb") as own_err, (tmp / "aio.err").open("wb") as aio_err:
                own = procs.start(
                    [cli, "serve", "--host", "127.0.0.1", "--port", str(own_port),
                     "--cert", str(cert), "--key", str(key), "--rules", str(args.rules),
                     "--probe-port", "0", "--cluster-snapshot", str(SNAPSHOT)],
                    server_core, stderr=own_err, stdout=subprocess.DEVNULL,
                )  # fmt: skip
                aio = procs.start(
                    [sys.executable, str(Path(__file__).resolve()), "--aiohttp-front",
                     str(aio_port), str(cert), str(key), str(args.rules), str(SNAPSHOT)],
                    server_core, stderr=aio_err, stdout=subprocess.DEVNULL,
                )  # fmt: skip
            fronts["own HTTP/1.1 (serve)"] = (own, own_port, tmp / "own.err")
            fronts["aiohttp web.Server"] = (aio, aio_port, tmp / "aio.err")
            for proc, port, err in fronts.values():
                wait_healthy(proc, port, ca, err)
            templates = {name: _templates(port, ca) for name, (_, port, _) in fronts.items()}

            print(f"HTTP fronts for one review pipeline — {machine()}")
            print(
                f"servers pinned to core {server_core}, load client to core {client_core}; "
                f"{args.concurrency} connections, {args.warmup:g} s warm-up + "
                f"{args.duration:g} s per run, {args.rounds} runs per front taking turns; "
                "one pod = /mutate then /validate of the mutated object, a name and namespace "
                "of its own, example snapshot, GPU holds on\n"
            )
            results: dict[str, list[dict[str, Any]]] = {name: [] for name in fronts}
            tag = 0
            for _ in range(args.rounds):
                for name, (proc, port, err) in fronts.items():
                    tag += 1
                    r = measure(args, procs, proc, port, ca, templates[name], tag, client_core)
                    results[name].append(r)
                    print(
                        f"  {name:<22} {r['pods_per_s']:7.0f} pods/s  "
                        f"{r['cpu_us_per_pod']:6.0f} µs CPU/pod  "
                        f"p50 {r['req_p50']:.2f} ms  p99 {r['req_p99']:.2f} ms/request  "
                        f"p99 {r['pod_p99']:.2f} ms/pod  server {r['server_busy']:.0f}% "
                        f"client {r['client_busy']:.0f}% other {r['other']:.0f}%  "
                        f"RSS {r['rss']:.0f} MB  errors {r['errors']}"
                    )
                    for s in r["samples"]:
                        print(f"    {s}")
                    if proc.poll() is not None:
                        raise RuntimeError(f"{name} exited:\n{tail(err)}")
            print("\nMedian of the runs:\n")
            print(
                "| front | pods/s | server CPU µs per admitted GPU pod "
                "| p50 ms/request | p99 ms/request | p99 ms/pod |"
            )
            print("| --- | ---: | ---: | ---: | ---: | ---: |")
            medians = {}
            for name, runs in results.items():

                def med(key: str, runs: list[dict[str, Any]] = runs) -> float:
                    return sorted(r[key] for r in runs)[len(runs) // 2]

                medians[name] = med("cpu_us_per_pod")
                print(
                    f"| {name} | {med('pods_per_s'):.0f} | {med('cpu_us_per_pod'):.0f} "
                    f"| {med('req_p50'):.2f} | {med('req_p99'):.2f} | {med('pod_p99'):.2f} |"
                )
            own_us, aio_us = medians["own HTTP/1.1 (serve)"], medians["aiohttp web.Server"]
            print(
                f"\nThe own layer saves {100 * (aio_us - own_us) / aio_us:.1f}% of the server "
                f"CPU per admitted GPU pod ({aio_us:.0f} → {own_us:.0f} µs)."
            )
        finally:
            procs.stop_all()
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
