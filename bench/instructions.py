#!/usr/bin/env python3
"""Instructions per review: the webhook's own work, counted by valgrind, steady on a noisy VM.

Wall-clock benchmarks on shared 2-core VMs drift by tens of percent between runs (CPU steal,
neighbours); an instruction count does not. This runs the real HTTP/1.1 connection (the
`serve` routes, the example cluster snapshot with GPU holds for the `-facts` scenarios, JSON
decision logging as `serve` sets it up) in one process, fed whole requests as the apiserver
sends them, under `valgrind --tool=callgrind`, twice: with N and with 2N reviews. Only the
reviews are counted: start-up and warm-up run with valgrind's instrumentation off (it is
turned on with `callgrind_control` once the process is ready), and only the thread that
answers the reviews counts. The difference divided by N is what one review costs in
user-space instructions. TLS, the kernel and the event loop are not in it (`bench/load.py`
has them). With `--facts live` the `-facts` scenarios read the live cache instead, as `serve`
in a cluster does: synced by list+watch from the same snapshot served as a cluster
(bench/livefacts.py, a protocol-speaking fake API server in a process of its own, not
counted). The cache's watch threads run on the wall clock (bookmarks, watch renewals, looking
again for the kinds the cluster does not serve), not per review: they are counted apart and
printed under the table, with the seconds they ran.

Run from the repository root against the build that ships:

    make compiled
    PYTHONSAFEPATH=1 PYTHONPATH=build/compiled .venv/bin/python bench/instructions.py

Needs valgrind (`apt-get install valgrind`). `--child` is the measured process itself.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
# `tests.support` from the repository, after PYTHONPATH: a compiled build given there is the
# `webhook` that runs.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

from reviews import SCENARIOS, UID_MARK, as_persisted, review  # noqa: E402

WARMUP = 300
READY = "ready"  # the child's line once it is warm: the parent turns counting on, then says go


class _Transport:
    """What the connection writes to: the answers, kept for the last one's check."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def close(self) -> None: ...

    def abort(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class _Owner:
    def now(self) -> float:
        return time.monotonic()

    def forget(self, conn: Any) -> None: ...


def _http(endpoint: str, body: bytes) -> bytes:
    head = (
        f"POST /{endpoint}?timeout=10s HTTP/1.1\r\nHost: gpu-admission.gpu-admission.svc:443\r\n"
        "User-Agent: kube-apiserver-admission\r\nAccept: application/json, */*\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _facts(source: str) -> tuple[Any, Callable[[], None]]:
    """The cluster facts `serve` would judge with, and what ends them: the example snapshot,
    or the live cache synced from it served as a cluster (bench/livefacts.py)."""
    from webhook.facts.sources import cluster_source
    from webhook.server.process import freeze_after_relist

    if source == "snapshot":
        facts = cluster_source(snapshot=REPO / "examples" / "cluster-snapshot.yaml")
        return facts, lambda: None
    import livefacts

    from tests.support.fake_apiserver import kubeconfig_for

    server, url = livefacts.start()
    tmp = tempfile.TemporaryDirectory(prefix="gpu-admission-instructions-")
    kubeconfig = Path(tmp.name) / "kubeconfig"
    kubeconfig.write_text(kubeconfig_for(url))
    facts = cluster_source(kubeconfig=kubeconfig, on_relist=freeze_after_relist)  # as `serve`
    facts.live.start()

    def end() -> None:
        facts.live.stop()
        server.communicate("")
        tmp.cleanup()

    if not facts.live.wait_synced(600):
        end()
        raise SystemExit("the live cache did not sync")
    return facts, end


def run_child(scenario: str, endpoint: str, count: int, source: str = "snapshot") -> int:
    """Answer WARMUP + `count` reviews of `endpoint` (a /validate review carries the object
    as this webhook's /mutate left it, as the apiserver sends it)."""
    from webhook.logs import setup
    from webhook.server.app import make_app
    from webhook.server.http.protocol import Connection
    from webhook.server.process import freeze_heap
    from webhook.server.reload import RuleHolder

    setup("info", "json")  # as `serve` does; stderr goes to /dev/null
    sc = next(s for s in SCENARIOS if s.name == scenario)
    holder = RuleHolder(source=REPO / "rules")
    holder.refresh()
    facts, end = _facts(source) if sc.facts else (None, lambda: None)
    transport = _Transport()
    conn = Connection(_Owner(), make_app(holder, facts))
    conn.connection_made(transport)  # type: ignore[arg-type]
    freeze_heap()  # as `serve` does
    obj = sc.build()
    target = obj
    if endpoint == "validate" and "mutate" in sc.endpoints:
        body = orjson.dumps(review(obj, user=sc.user, groups=sc.groups))
        conn.data_received(_http("mutate", body.replace(UID_MARK.encode(), b"preflight")))
        answer = orjson.loads(transport.out[-1].split(b"\r\n\r\n", 1)[1])["response"]
        target = as_persisted(obj, answer.get("patch"))
    template = orjson.dumps(review(target, user=sc.user, groups=sc.groups))
    requests = [
        _http(endpoint, template.replace(UID_MARK.encode(), f"{i:012d}".encode()))
        for i in range(WARMUP + count)
    ]
    for request in requests[:WARMUP]:
        conn.data_received(request)
    print(READY, flush=True)  # counting starts here (`_collected`)
    sys.stdin.readline()
    for request in requests[WARMUP:]:
        conn.data_received(request)
    last = orjson.loads(transport.out[-1].split(b"\r\n\r\n", 1)[1])
    end()
    if "response" not in last:
        print(f"the webhook did not answer a review: {last}", file=sys.stderr)
        return 1
    return 0


@dataclass(frozen=True)
class Counted:
    """One measured process's instructions from the moment counting was turned on."""

    reviews: int  # the thread that answers the reviews (the process's main thread)
    watches: int  # every other thread: the live cache's watch threads, if any
    seconds: float  # how long counting was on


def _threads(out: Path) -> dict[int, int]:
    """Instructions by valgrind thread number (1: the main thread) of one callgrind run."""
    counts: dict[int, int] = {}
    for part in out.parent.glob(f"{out.name}-*"):
        found = re.search(r"^summary: (\d+)", part.read_text(), re.M)
        counts[int(part.name.rsplit("-", 1)[1])] = int(found.group(1)) if found else 0
    return counts


def _collected(scenario: str, endpoint: str, count: int, tmp: Path, source: str) -> Counted:
    """User-space instructions of one child process answering `count` reviews after its
    warm-up, counted from the moment it is ready, by thread."""
    run = f"{scenario}.{endpoint}.{count}"  # one file per thread: none left from another run
    log, out = tmp / f"valgrind.{run}", tmp / f"callgrind.{run}"
    proc = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",  # start-up and warm-up uncounted: on once the child is ready
            "--separate-threads=yes",  # the reviews' thread apart from the watch threads
            f"--callgrind-out-file={out}",
            f"--log-file={log}",
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            scenario,
            endpoint,
            str(count),
            "--facts",
            source,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the decision log lines
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    ready = proc.stdout.readline().strip() == READY
    began = time.monotonic()
    if ready:
        subprocess.run(
            ["callgrind_control", "--instr=on", str(proc.pid)],
            capture_output=True,
            check=True,
            timeout=120,
        )
        began = time.monotonic()  # counting is on
        proc.stdin.write("go\n")
        proc.stdin.flush()
    proc.stdin.close()
    proc.stdout.read()
    code = proc.wait()
    seconds = time.monotonic() - began if ready else 0.0
    threads = _threads(out)
    if code != 0 or not ready or 1 not in threads:
        text = log.read_text() if log.exists() else ""
        raise SystemExit(f"the measured process failed (exit {code}):\n{text[-2000:]}")
    watches = sum(n for thread, n in threads.items() if thread != 1)
    return Counted(threads[1], watches, seconds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--scenario",
        action="append",
        choices=[s.name for s in SCENARIOS],
        help="repeatable; default: gpu-pod-facts and gpu-pod-denied",
    )
    p.add_argument("--requests", type=int, default=1000, help="N (default 1000)")
    p.add_argument(
        "--facts",
        choices=["snapshot", "live"],
        default="snapshot",
        help="where the -facts scenarios' cluster facts come from: the example snapshot "
        "(default), or the live cache synced by list+watch from that snapshot served as a "
        "cluster (bench/livefacts.py)",
    )
    p.add_argument(
        "--child", nargs=3, metavar=("SCENARIO", "ENDPOINT", "COUNT"), help=argparse.SUPPRESS
    )
    args = p.parse_args(argv)
    if args.child:
        scenario, endpoint, count = args.child
        return run_child(scenario, endpoint, int(count), args.facts)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("bench/instructions.py needs valgrind: apt-get install valgrind", file=sys.stderr)
        return 2
    names = args.scenario or ["gpu-pod-facts", "gpu-pod-denied"]
    from webhook.engine.build import engine_build

    print(
        f"instructions per review, engine {engine_build()}, N = {args.requests}, "
        f"cluster facts: {'the live cache' if args.facts == 'live' else 'the example snapshot'}"
    )
    print("| scenario | endpoint | instructions per review |")
    print("| --- | --- | ---: |")
    watched: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpu-admission-instructions-") as tmp_s:
        tmp = Path(tmp_s)
        for name in names:
            for endpoint in next(s for s in SCENARIOS if s.name == name).endpoints:
                once = _collected(name, endpoint, args.requests, tmp, args.facts)
                twice = _collected(name, endpoint, 2 * args.requests, tmp, args.facts)
                per_review = (twice.reviews - once.reviews) / args.requests
                print(f"| {name} | {endpoint} | {per_review:,.0f} |")
                if once.watches or twice.watches:
                    watched.append(
                        f"{name} {endpoint}: {once.watches:,} in {once.seconds:.0f} s (N), "
                        f"{twice.watches:,} in {twice.seconds:.0f} s (2N)"
                    )
    if watched:
        print("\nThe watch threads meanwhile, counted apart (not per review):")
        for line in watched:
            print(f"- {line}")
    print(f"\nCommand: `{' '.join(['bench/instructions.py', *(argv or sys.argv[1:])])}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
