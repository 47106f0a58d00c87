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

This file is the entry point and the orchestration; the rest lives next to it: reviews.py (the
scenario AdmissionReviews), clients.py (the load clients), floor.py (the floor server),
cpustat.py (/proc CPU accounting), children.py (child processes), report.py (the output).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

# The modules next to this file; run as a script (also as its own child processes) the folder
# is already sys.path[0], this covers `python -m bench.load` and imports from elsewhere.
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from children import Processes, free_port, read_line, tail, wait_healthy  # noqa: E402
from clients import REQUEST_TIMEOUT, get_json, post_once, run_client_worker  # noqa: E402
from cpustat import CLIENT_CORE, SERVER_CORE, CpuSnapshot, descendants, rss_mb, wait_quiet  # noqa: E402
from floor import run_floor_server  # noqa: E402
from report import (  # noqa: E402
    Result,
    command_line,
    describe,
    machine,
    markdown,
    percentile,
    report_line,
    summary,
)
from reviews import (  # noqa: E402
    RS_CONTROLLER,
    SA_GROUPS,
    SCENARIOS,
    UID_MARK,
    Scenario,
    as_persisted,
    gpu_pod,
    review,
)
from wrkclient import wrk_path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


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
        rate: float | None = None,
    ) -> Result:
        """One timed run: start the clients, sample /proc at window edges, merge results.
        With `rate`, the clients offer that many reviews a second in all (open loop) over
        `concurrency` connections."""
        profiled = self.args.profile and scenario != "floor"
        stages_before = get_json(port, self.ca, "/debug/stages") if profiled else None
        if self.args.settle > 0:
            wait_quiet([p.pid for p in self.procs.procs] + [os.getpid()], self.args.settle)
        # wrk is one process whatever --clients says: its threads are the clients.
        wrk = self.args.client == "wrk"
        nclients = 1 if wrk else min(self.args.clients, concurrency)
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
                "rate": rate * share / concurrency if rate else None,
                "threads": self.args.clients,
                # wrk's worker brackets its run with CPU snapshots of these (and itself).
                "watch": [server.pid, *(p.pid for p in self.procs.procs), os.getpid()],
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
                if read_line(proc.stdout, 30).strip() != b"ready":
                    raise RuntimeError("load client failed to start")
            # wrk runs whole seconds, its warm-up included: a little slack before the window.
            t_start = time.monotonic() + self.args.warmup + (0.5 if wrk else 0.0)
            t_end = t_start + self.args.duration
            for proc in clients:
                assert proc.stdin is not None
                proc.stdin.write(f"go {t_start!r} {t_end!r}\n".encode())
                proc.stdin.flush()
            ours = [server.pid, *(p.pid for p in clients)]
            ours += [p.pid for p in self.procs.procs if p.pid not in ours] + [os.getpid()]
            time.sleep(max(0.0, t_start - time.monotonic()))
            # The clients' own children too (wrk runs below its worker).
            kids = [k for p in clients for k in descendants(p.pid)]
            before = CpuSnapshot.take(ours + kids)
            time.sleep(max(0.0, t_end - time.monotonic()))
            kids = [k for p in clients for k in descendants(p.pid)]
            after = CpuSnapshot.take(ours + kids)
            outs = []
            for proc in clients:
                assert proc.stdout is not None
                line = read_line(proc.stdout, REQUEST_TIMEOUT + 20)
                if not line:
                    raise RuntimeError("load client died without a result")
                outs.append(orjson.loads(line))
        finally:
            for proc in clients:
                self.procs.stop(proc)
        if wrk:  # the worker's snapshots, around wrk's own run (see wrkclient.drive_wrk)
            before, after = (CpuSnapshot.from_json(doc) for doc in outs[0]["cpu"])
            kids = [outs[0]["client_pid"]]
            t_start, t_end = before.at, after.at
        lat = sorted(x for o in outs for x in o.get("latencies_us", ()))
        p50, p99 = percentile(lat, 0.50), percentile(lat, 0.99)
        if wrk:  # one wrk process: its own percentiles
            p50, p99 = outs[0]["p50_us"] / 1000, outs[0]["p99_us"] / 1000
        window = min(t_end, max(o["finished"] for o in outs)) - t_start
        stages = None
        if stages_before is not None:
            after_stages = get_json(port, self.ca, "/debug/stages")
            reviews = after_stages["reviews"] - stages_before["reviews"]
            stages = {
                name: 1e6
                * (after_stages["seconds"][name] - stages_before["seconds"][name])
                / max(reviews, 1)
                for name in after_stages["seconds"]
            }
        return Result(
            scenario=scenario,
            endpoint=endpoint,
            concurrency=concurrency,
            rps=sum(o["ok"] for o in outs) / window if window > 0 else 0.0,
            p50_ms=p50,
            p99_ms=p99,
            errors=sum(o["errors"] for o in outs),
            rss_mb=rss_mb(server.pid),
            server_cpu=before.used(after, server.pid),
            client_cpu=before.used_below(after, [p.pid for p in clients] + kids),
            other_cpu=before.other(after),
            cores=before.cores_usage(after),
            samples=[s for o in outs for s in o["samples"]],
            capped=any(o["issued"] >= spec["max_requests"] for o in outs),
            stages=stages,
            rate=rate,
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

            chosen = [sc for sc in SCENARIOS if not args.scenario or sc.name in args.scenario]
            floor_port, hook_port, facts_port = free_port(), free_port(), free_port()
            floor_err, hook_err = tmp / "floor.stderr", tmp / "webhook.stderr"
            facts_err = tmp / "webhook-facts.stderr"
            serve = [cli, "serve", "--host", "127.0.0.1", "--cert", str(cert), "--key", str(key),
                     "--rules", str(args.rules), "--probe-port", "0",
                     *(["--profile-stages"] if args.profile else [])]  # fmt: skip
            with floor_err.open("wb") as f_err, hook_err.open("wb") as h_err:
                floor = procs.start(
                    [sys.executable, str(Path(__file__).resolve()), "--floor-server",
                     str(floor_port), str(cert), str(key)],
                    server_core,
                    stderr=f_err,
                    stdout=subprocess.DEVNULL,
                )  # fmt: skip
                hook = procs.start(
                    [*serve, "--port", str(hook_port)],
                    server_core,
                    stderr=h_err,
                    stdout=subprocess.DEVNULL,
                )
            # Scenarios with cluster facts: the example snapshot, GPU holds on (the default).
            facts_hook = None
            if any(sc.facts for sc in chosen):
                with facts_err.open("wb") as x_err:
                    facts_hook = procs.start(
                        [*serve, "--port", str(facts_port), "--cluster-snapshot",
                         str(REPO / "examples" / "cluster-snapshot.yaml")],
                        server_core,
                        stderr=x_err,
                        stdout=subprocess.DEVNULL,
                    )  # fmt: skip
            wait_healthy(floor, floor_port, ca, floor_err)
            wait_healthy(hook, hook_port, ca, hook_err)
            if facts_hook is not None:
                wait_healthy(facts_hook, facts_port, ca, facts_err)

            print(f"gpu-admission load benchmark — {machine()}")
            print(
                f"server pinned to core {server_core}, {args.clients} {args.client} client "
                f"process(es) pinned to core {bench.client_core}; {args.warmup:g} s warm-up + "
                f"{args.duration:g} s per run, at most {args.max_requests} requests per run\n"
            )
            print("Preflight (one request each; what the webhook answers):")
            runs = []
            for server, port, err, group in (
                (hook, hook_port, hook_err, [sc for sc in chosen if not sc.facts]),
                (facts_hook, facts_port, facts_err, [sc for sc in chosen if sc.facts]),
            ):
                for sc, endpoint, template, answer in preflight(port, ca, err, group):
                    print(f"  {endpoint:<8} {sc.name:<15} {len(template):5d} B  {describe(answer)}")
                    runs.append((sc.name, endpoint, template, server, port, err))
            print()

            if args.open_loop:
                # Open loop: each rate offered to every run, over the largest concurrency's
                # connections; latency from when each review was due. No floor: a fixed
                # arrival rate is what both would be offered, so only latency compares.
                connections = max(args.concurrency)
                for rate in args.open_loop:
                    print(f"Open loop, {rate:g} reviews/s over {connections} connections:")
                    for name, endpoint, template, server, port, err in runs:
                        r = bench.run(
                            server, port, name, endpoint, template, connections,
                            check_uid=True, rate=rate,
                        )  # fmt: skip
                        print(report_line(r))
                        results.append(r)
                        if r.errors:
                            print(f"!! {r.errors} failed requests; first ones: {r.samples}")
                            print(f"   webhook stderr (last lines):\n{tail(err)}")
                        if server.poll() is not None:
                            raise RuntimeError(f"webhook exited with {server.returncode}")
                    print()
                runs = []  # the closed-loop runs below are skipped
                args.concurrency = []
            # The floor reads the same bytes as the GPU pod /mutate run, whatever is selected.
            floor_body = orjson.dumps(review(gpu_pod(), user=RS_CONTROLLER, groups=SA_GROUPS))
            for concurrency in args.concurrency:
                print(f"Concurrency {concurrency}:")
                # --rounds: the floor and every run take turns, so a machine that speeds up or
                # slows down meanwhile weighs on both alike; the median round of each is kept.
                floors: list[Result] = []
                turns: dict[tuple[str, str], list[Result]] = {}
                for turn in range(args.rounds):
                    if args.rounds > 1:
                        print(f" round {turn + 1} of {args.rounds}")
                    fr = bench.run(
                        floor, floor_port, "floor", "mutate", floor_body, concurrency,
                        check_uid=False,
                    )  # fmt: skip
                    print(report_line(fr))
                    floors.append(fr)
                    for name, endpoint, template, server, port, err in runs:
                        r = bench.run(
                            server, port, name, endpoint, template, concurrency, check_uid=True
                        )
                        r.floor = fr
                        print(report_line(r))
                        turns.setdefault((name, endpoint), []).append(r)
                        if r.errors or server.poll() is not None:
                            print(f"!! {r.errors} failed requests on {endpoint} {name}; first:")
                            for s in r.samples:
                                print(f"   {s}")
                            print(f"   request template (uid at {UID_MARK}):\n{template.decode()}")
                            print(f"   webhook stderr (last lines):\n{tail(err)}")
                        if server.poll() is not None:
                            raise RuntimeError(f"webhook exited with {server.returncode}")
                fr = median_run(floors)
                results.append(fr)
                for runs_of_one in turns.values():
                    r = median_run(runs_of_one)
                    r.floor = fr
                    results.append(r)
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


def median_run(results: list[Result]) -> Result:
    """The run of median server CPU per request, carrying the failures of every round."""
    ordered = sorted(results, key=lambda r: r.cpu_us)
    median = ordered[(len(ordered) - 1) // 2]
    median.errors = sum(r.errors for r in results)
    return median


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
        "--rounds",
        type=int,
        default=1,
        help="closed loop: run the floor and every scenario this many times, taking turns, and "
        "report each one's median round (default 1)",
    )
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
        choices=["wrk", "raw", "aiohttp"],
        help="wrk, an independent C client (the default where installed: `make bench` installs "
        "it), our minimal HTTP/1.1 keep-alive client (the default without wrk), or an aiohttp "
        "ClientSession (it cannot saturate the floor on one core); wrk runs --clients threads "
        "in one process",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=30.0,
        help="before each run, wait up to this many seconds for other processes to go quiet",
    )
    p.add_argument("--rules", type=Path, default=REPO / "rules", help="rules folder to serve")
    p.add_argument(
        "--open-loop",
        type=float,
        nargs="+",
        metavar="RATE",
        help="offer each of these reviews/s to every run (fixed arrival times, latency from "
        "when each was due) instead of the closed-loop concurrency runs; e.g. 500 2000 5000",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="serve with --profile-stages and print each run's server µs per request by stage",
    )
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
    if args.client is None:
        args.client = "wrk" if wrk_path() else "raw"
        if args.client == "raw":
            print("note: wrk is not installed (`make bench` installs it); using --client raw")
    if args.client == "wrk" and args.open_loop:
        print("--open-loop needs a client that keeps a fixed arrival rate: add --client raw")
        return 2
    signal.signal(signal.SIGTERM, _sigterm)
    return run_bench(args)


if __name__ == "__main__":
    sys.exit(main())
