#!/usr/bin/env python3
"""Abuse benchmark: what hostile clients cost gpu-admission, and what a real review sees meanwhile.

Starts a local webhook (the real `serve`, default limits, the offline cluster snapshot, a rules
folder it watches) and runs the hostile-client attacks one after the other:

  slow-heads        clients sending a request head one byte a second (slowloris)
  stalled-uploads   clients announcing an 8 MiB body, sending half of it, then stalling
  idle-conns        far more idle keep-alive connections than the connection cap
  huge-quantity     reviews of a pod asking for nvidia.com/gpu: "1e10000000", back to back
  rule-bomb         a YAML alias bomb written into the watched rules folder

Each attacker reconnects as soon as the server cuts it, for the whole phase. Meanwhile a
separate process (its own core when there are two) sends one real GPU-pod /validate review
every 10 ms over a keep-alive connection, as the apiserver would, and records its latency,
and this process samples the server's RSS (/proc/<pid>/status VmRSS) every 50 ms. The table
gives, per phase: the real reviews' p50/p99/max latency and failures, the server's RSS at the
start, highest and after the attack (1 s later), its CPU, and how many clients it cut, by
reason (gpu_admission_clients_cut_total).

Finally the stalled-upload phase runs again against a server started with --no-release-memory, to
show what handing memory back after large bodies is worth.

Run from the repository root: `.venv/bin/python bench/abuse.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import re
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from attacks import (  # noqa: E402
    Attack,
    Tally,
    Target,
    huge_quantities,
    idle_connections,
    rule_bomb,
    slow_heads,
    stalled_uploads,
)
from children import Processes, free_port, tail  # noqa: E402
from cpustat import CLIENT_CORE, SERVER_CORE, cpu_seconds, rss_mb  # noqa: E402
from report import machine, percentile  # noqa: E402
from reviews import RS_CONTROLLER, SA_GROUPS, UID_MARK, gpu_pod, review  # noqa: E402

REPO = HERE.parent
MIB = 1024 * 1024
PROBE_INTERVAL = 0.01  # one real review every 10 ms
REQUEST_TIMEOUT = 10.0  # the apiserver's ?timeout=10s
# The server may use this much address space at most: a safety net should an attack make it
# allocate without bound (it must not), so the benchmark cannot take the machine down.
SERVER_ADDRESS_SPACE = 4 * 1024 * MIB


def legit_body() -> bytes:
    return json.dumps(review(gpu_pod(), user=RS_CONTROLLER, groups=SA_GROUPS)).encode()


# --- the real review, from its own process --------------------------------------------------------


def run_prober(port: int, ca: str, seconds: float) -> int:
    """`abuse.py --prober PORT CA SECONDS`: real reviews at a steady pace; JSON on stdout."""
    head, tail_ = legit_body().split(UID_MARK.encode())
    ctx = ssl.create_default_context(cafile=ca)
    latencies: list[int] = []  # µs
    errors: dict[str, int] = {}
    conn: http.client.HTTPSConnection | None = None
    end = time.monotonic() + seconds
    n = 0
    while (now := time.monotonic()) < end:
        n += 1
        uid = f"00000000-0000-4000-8000-{n:012d}".encode()
        started = time.perf_counter()
        try:
            if conn is None:
                conn = http.client.HTTPSConnection(
                    "127.0.0.1", port, context=ctx, timeout=REQUEST_TIMEOUT
                )
            conn.request(
                "POST",
                "/validate?timeout=10s",
                body=head + uid + tail_,
                headers={"Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200 or uid not in data:
                raise RuntimeError(f"HTTP {resp.status}")
            latencies.append(round((time.perf_counter() - started) * 1e6))
            if resp.getheader("connection") == "close":
                conn.close()
                conn = None
        except Exception as exc:  # every failure is counted and shown, never hidden
            key = type(exc).__name__ + (f" {exc}" if isinstance(exc, RuntimeError) else "")
            errors[key] = errors.get(key, 0) + 1
            if conn is not None:
                conn.close()
            conn = None
        time.sleep(max(0.0, PROBE_INTERVAL - (time.monotonic() - now)))
    print(json.dumps({"latencies_us": latencies, "errors": errors}))
    return 0


# --- the server and the phases --------------------------------------------------------------------


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    probe_port: int
    log: Path

    def metrics(self) -> dict[str, float]:
        url = f"http://127.0.0.1:{self.probe_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        values: dict[str, float] = {}
        for m in re.finditer(
            r"^(gpu_admission_\w+?)(?:_total)?\{([^}]*)\} ([\d.e+-]+)$", text, re.M
        ):
            values[f"{m[1]}{{{m[2]}}}"] = float(m[3])
        return values


def start_server(
    procs: Processes, tmp: Path, rules_dir: Path, core: int | None, *extra: str
) -> Server:
    port, probe_port = free_port(), free_port()
    log = tmp / f"server-{port}.log"
    certs = tmp / "certs"

    with log.open("wb") as out:
        proc = procs.start(
            [str(Path(sys.executable).parent / "gpu-admission"), "serve",
             "--host", "127.0.0.1", "--port", str(port), "--probe-port", str(probe_port),
             "--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key"),
             "--rules", str(rules_dir), "--rules-check-seconds", "0.5",
             "--cluster-snapshot", str(REPO / "examples" / "cluster-snapshot.yaml"),
             "--log-format", "json", "--log-level", "warning", *extra],
            core,
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    # The address-space cap, applied from outside (preexec_fn is taken by the core pinning).
    with contextlib.suppress(OSError, AttributeError):
        resource.prlimit(proc.pid, resource.RLIMIT_AS, (SERVER_ADDRESS_SPACE,) * 2)
    server = Server(proc, port, probe_port, log)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{tail(log)}")
        url = f"http://127.0.0.1:{probe_port}/readyz"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as ready:
            if ready.status == 200:
                return server
        if time.monotonic() > deadline:
            raise RuntimeError(f"server not ready after 30 s:\n{tail(log)}")
        time.sleep(0.1)


@dataclass
class Phase:
    name: str
    detail: str
    attack: Attack | None


@dataclass
class Row:
    phase: Phase
    ok: int
    errors: dict[str, int]
    p50: float
    p99: float
    worst: float
    rss_start: float
    rss_max: float
    rss_after: float
    cpu: float
    cuts: dict[str, int]
    tally: Tally


def _on_core(core: int | None, nice: int = 0) -> Callable[[], None]:
    def preexec() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})
        if nice:
            os.nice(nice)

    return preexec


async def run_phase(
    server: Server, phase: Phase, ca: Path, seconds: float, client_core: int | None, args: list[str]
) -> Row:
    """One phase: the prober and (niced, so the prober is never starved by it) the attacker
    in their own processes, the server's RSS sampled from here."""
    before = server.metrics()
    rss_start = rss_mb(server.proc.pid)
    cpu_start, t_start = cpu_seconds(server.proc.pid), time.monotonic()
    me = str(Path(__file__).resolve())
    common = [str(server.port), str(ca), str(seconds)]
    prober = await asyncio.create_subprocess_exec(
        sys.executable, me, "--prober", *common,
        stdout=asyncio.subprocess.PIPE, preexec_fn=_on_core(client_core),
    )  # fmt: skip
    attacker = None
    if phase.attack is not None:
        attacker = await asyncio.create_subprocess_exec(
            sys.executable, me, "--attacker", phase.name, *common, *args,
            stdout=asyncio.subprocess.PIPE, preexec_fn=_on_core(client_core, nice=10),
        )  # fmt: skip
    rss_max = rss_start
    waits = [asyncio.ensure_future(c.communicate()) for c in (prober, attacker) if c]
    while not all(w.done() for w in waits):
        with contextlib.suppress(OSError, ValueError):
            rss_max = max(rss_max, rss_mb(server.proc.pid))
        await asyncio.wait(waits, timeout=0.05)
    cpu = 100 * (cpu_seconds(server.proc.pid) - cpu_start) / (time.monotonic() - t_start)
    await asyncio.sleep(1.0)
    rss_after = rss_mb(server.proc.pid)
    after = server.metrics()
    cuts = {
        re.sub(r'.*reason="([^"]+)".*', r"\1", k): int(v - before.get(k, 0))
        for k, v in after.items()
        if k.startswith("gpu_admission_clients_cut{") and v - before.get(k, 0)
    }
    reloads = {
        re.sub(r'.*result="([^"]+)".*', r"reload \1", k): int(v - before.get(k, 0))
        for k, v in after.items()
        if k.startswith("gpu_admission_rule_reloads{") and v - before.get(k, 0)
    }
    result = json.loads(waits[0].result()[0])
    tally = Tally(**json.loads(waits[1].result()[0])) if attacker else Tally()
    tally.answers = {int(k): v for k, v in tally.answers.items()}
    lat = sorted(result["latencies_us"])
    return Row(
        phase,
        len(lat),
        result["errors"],
        percentile(lat, 0.50),
        percentile(lat, 0.99),
        lat[-1] / 1000 if lat else float("nan"),
        rss_start,
        rss_max,
        rss_after,
        cpu,
        cuts | reloads,
        tally,
    )


def run_attacker(name: str, port: int, ca: str, seconds: float, args: argparse.Namespace) -> int:
    """`abuse.py --attacker NAME PORT CA SECONDS ...`: one attack; its tally as JSON."""
    attack = {p.name: p.attack for p in phases(args, args.rules_dir)}[name]
    assert attack is not None
    target = Target(port, ssl.create_default_context(cafile=ca))
    tally = Tally()
    asyncio.run(attack(target, time.monotonic() + seconds, tally))
    print(json.dumps(asdict(tally)))
    return 0


def phases(args: argparse.Namespace, rules_dir: Path) -> list[Phase]:
    return [
        Phase("baseline", "none", None),
        Phase("slow-heads", f"{args.slow} clients, 1 head byte/s", slow_heads(args.slow)),
        Phase(
            "stalled-uploads",
            f"{args.uploads} clients, 8 MiB announced, 4 MiB sent",
            stalled_uploads(args.uploads),
        ),
        Phase("idle-conns", f"{args.idle} idle connections", idle_connections(args.idle)),
        Phase(
            "huge-quantity",
            f'{args.quantity} clients, nvidia.com/gpu "1e10000000"',
            huge_quantities(args.quantity),
        ),
        Phase("rule-bomb", "9x9 YAML alias bomb in rules/", rule_bomb(rules_dir)),
    ]


def print_rows(rows: list[Row], memory_limit: str) -> None:
    print(
        "| phase | attack | real reviews ok / failed | p50 ms | p99 ms | max ms "
        "| RSS start / max / after MB | server CPU | cut by the server | attackers saw |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |")
    for r in rows:
        errors = sum(r.errors.values())
        failed = (
            f"{errors} ({', '.join(f'{k}: {v}' for k, v in r.errors.items())})" if errors else "0"
        )
        cuts = ", ".join(f"{k} {v}" for k, v in sorted(r.cuts.items())) or "-"
        saw = r.tally.describe() if r.phase.attack else "-"
        print(
            f"| {r.phase.name} | {r.phase.detail} | {r.ok} / {failed} | {r.p50:.2f} | "
            f"{r.p99:.2f} | {r.worst:.1f} | {r.rss_start:.0f} / {r.rss_max:.0f} / "
            f"{r.rss_after:.0f} | {r.cpu:.0f}% | {cuts} | {saw} |"
        )
    print(f"\nThe Deployment's memory limit: {memory_limit}.")


def memory_limit() -> str:
    text = (REPO / "manifests" / "base" / "deployment.yaml").read_text()
    found = re.search(r"limits:\s*\n\s*cpu: \S+\s*\n\s*memory: (\S+)", text)
    return found[1] if found else "unknown"


async def main_async(args: argparse.Namespace) -> int:
    procs = Processes()
    cores = os.sched_getaffinity(0)
    pin = {SERVER_CORE, CLIENT_CORE} <= cores
    server_core = SERVER_CORE if pin else None
    client_core = CLIENT_CORE if pin else None
    seconds = args.seconds or (6.0 if args.quick else 12.0)
    with tempfile.TemporaryDirectory(prefix="gpu-admission-abuse-") as tmp_s:
        tmp = Path(tmp_s)
        subprocess.run(
            [str(Path(sys.executable).parent / "gpu-admission"), "certs", "generate",
             "--out", str(tmp / "certs"), "--hosts", "localhost,127.0.0.1"],
            check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        ca = tmp / "certs" / "ca.crt"
        rules_dir = tmp / "rules"
        shutil.copytree(args.rules, rules_dir)
        every = phases(args, rules_dir)
        attacker_args = [
            "--slow", str(args.slow), "--uploads", str(args.uploads), "--idle", str(args.idle),
            "--quantity", str(args.quantity), "--rules-dir", str(rules_dir),
        ]  # fmt: skip
        chosen = [p for p in every if not args.phase or p.name in args.phase or p.attack is None]
        print(f"gpu-admission abuse benchmark — {machine()}")
        print(
            f"server pinned to core {server_core}, attackers and the real-review prober to core "
            f"{client_core}; {seconds:g} s per phase; default serve limits\n"
        )
        rows: list[Row] = []
        try:
            server = start_server(procs, tmp, rules_dir, server_core)
            for phase in chosen:
                rows.append(await run_phase(server, phase, ca, seconds, client_core, attacker_args))
                print(f"  {phase.name}: done", flush=True)
                if server.proc.poll() is not None:
                    raise RuntimeError(f"server died:\n{tail(server.log)}")
            print()
            print_rows(rows, memory_limit())
            if args.compare_memory and any(p.name == "stalled-uploads" for p in chosen):
                procs.stop(server.proc)
                unreleased = start_server(procs, tmp, rules_dir, server_core, "--no-release-memory")
                upload = next(p for p in every if p.name == "stalled-uploads")
                row = await run_phase(unreleased, upload, ca, seconds, client_core, attacker_args)
                released = next(r for r in rows if r.phase.name == "stalled-uploads")
                print(
                    f"\nRSS after the stalled uploads (1 s after the attackers stop): "
                    f"{released.rss_after:.0f} MB with the default (--release-memory), "
                    f"{row.rss_after:.0f} MB with --no-release-memory "
                    f"(peaks {released.rss_max:.0f} / {row.rss_max:.0f} MB; "
                    f"both started at {released.rss_start:.0f} / {row.rss_start:.0f} MB)."
                )
        except KeyboardInterrupt:
            return 130
        finally:
            procs.stop_all()
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Attack a local gpu-admission and measure the cost.")
    p.add_argument("--quick", action="store_true", help="6 s phases instead of 12 s")
    p.add_argument("--seconds", type=float, help="seconds per phase")
    p.add_argument("--phase", action="append", help="run only this attack (repeatable)")
    p.add_argument("--slow", type=int, default=200, help="slow-head clients (default 200)")
    p.add_argument("--uploads", type=int, default=16, help="stalled uploaders (default 16)")
    p.add_argument("--idle", type=int, default=600, help="idle connections (default 600)")
    p.add_argument("--quantity", type=int, default=4, help="huge-quantity clients (default 4)")
    p.add_argument("--rules", type=Path, default=REPO / "rules", help="rules folder to copy")
    p.add_argument(
        "--no-compare-memory",
        dest="compare_memory",
        action="store_false",
        help="skip the stalled-upload rerun with --no-release-memory",
    )
    p.add_argument("--prober", nargs=3, metavar=("PORT", "CA", "SECONDS"), help=argparse.SUPPRESS)
    p.add_argument("--attacker", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--rules-dir", type=Path, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.prober:
        port, ca, seconds = args.prober
        return run_prober(int(port), ca, float(seconds))
    if args.attacker:
        name, port, ca, seconds = args.attacker
        return run_attacker(name, int(port), ca, float(seconds), args)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
