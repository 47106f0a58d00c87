"""CPU accounting from /proc for bench/load.py: per-process CPU time, per-core jiffies, RSS.

The webhook (or floor) server is pinned to SERVER_CORE and the load clients to CLIENT_CORE;
CpuSnapshot reads both cores and our own processes, so a run can say which side was busy and
how much of the cores other processes took.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_CORE = 0
CLIENT_CORE = 1
CORES = (SERVER_CORE, CLIENT_CORE)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all threads) from /proc/<pid>/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # comm may contain spaces: skip past it
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (a client worker's wrk), from /proc/<pid>/task/*/children."""
    out: list[int] = []
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            with contextlib.suppress(OSError, ValueError):
                kids = [int(k) for k in (task / "children").read_text().split()]
                out += kids
                todo += kids
    return out


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

    def to_json(self) -> dict[str, Any]:
        procs = {str(p): s for p, s in self.procs.items()}
        return {"at": self.at, "procs": procs, "cores": {str(c): t for c, t in self.cores.items()}}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> CpuSnapshot:
        """A snapshot a client worker took (its keys came back as strings)."""
        procs = {int(p): float(s) for p, s in doc["procs"].items()}
        return cls(float(doc["at"]), procs, {int(c): t for c, t in doc["cores"].items()})

    def used(self, later: CpuSnapshot, pid: int) -> float:
        """% of one core that `pid` used between the two snapshots."""
        if pid not in self.procs or pid not in later.procs:
            return 0.0
        return 100 * (later.procs[pid] - self.procs[pid]) / (later.at - self.at)

    def used_below(self, later: CpuSnapshot, pids: list[int]) -> float:
        """% of one core that `pids` used, a process first seen in `later` (born in between)
        counted from zero."""
        used = sum(later.procs[p] - self.procs.get(p, 0.0) for p in pids if p in later.procs)
        return 100 * used / (later.at - self.at)

    def other(self, later: CpuSnapshot) -> float:
        """% of one core used on CORES by processes not in `procs` (ours), softirq excluded.

        Jiffies are 10 ms ticks, so this is approximate; it exists because a shared machine
        (someone running the test suite) silently halves the numbers otherwise.
        """
        ticks = sum(
            sum(later.cores[c][:3]) - sum(self.cores[c][:3]) for c in self.cores if c in later.cores
        )
        ours = sum(later.procs[p] - self.procs.get(p, 0.0) for p in later.procs)
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
