"""Results and output of bench/load.py: per-run lines, the markdown table and the summary.

A Result is one timed run; it knows its bottleneck (server, client or other processes) and
its share of the floor's throughput at the same concurrency.
"""

from __future__ import annotations

import base64
import contextlib
import os
import platform
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from webhook.engine.build import engine_build


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
    # --profile: server µs per review by stage (webhook/server/stages.py), from /debug/stages
    stages: dict[str, float] | None = None
    # --open-loop: the reviews/s offered, whatever the server answers (None: closed loop)
    rate: float | None = None

    @property
    def load(self) -> str:
        """How the load was made: `c=16` connections in lock-step, or `open 2000/s`."""
        return f"open {self.rate:.0f}/s" if self.rate else f"c={self.concurrency}"

    @property
    def cpu_us(self) -> float:
        """Server CPU per answered request, in µs."""
        return self.server_cpu / 100 / self.rps * 1e6 if self.rps else float("nan")

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


def report_line(r: Result) -> str:
    cores = ", ".join(
        f"core {c} busy {b:.0f}% idle {i:.0f}% steal {st:.0f}%"
        for c, (b, i, st) in sorted(r.cores.items())
    )
    return (
        f"  {r.scenario:<15} {r.endpoint:<9} {r.load:<10} {r.rps:7.0f} req/s  "
        f"p50 {r.p50_ms:6.2f} ms  p99 {r.p99_ms:6.2f} ms  errors {r.errors}  "
        f"RSS {r.rss_mb:.1f} MB"
        + (f"  {r.pct_floor} of floor" if r.floor else "")
        + ("  STOPPED by --max-requests before the window ended" if r.capped else "")
        + "\n"
        f"      cpu: server {r.server_cpu:.0f}% ({r.cpu_us:.0f} µs/request), client "
        f"{r.client_cpu:.0f}%, other processes {r.other_cpu:.0f}% -> {r.bottleneck}  ({cores})"
        + (f"\n      {stage_line(r)}" if r.stages is not None else "")
    )


def stage_line(r: Result) -> str:
    """Server µs per request by stage; what the stages do not cover is the HTTP read and
    write, TLS and the event loop (and, at most a few µs, the stopwatch itself)."""
    stages = r.stages or {}
    timed = sum(stages.values())
    parts = [f"{name} {us:.1f}" for name, us in stages.items() if us >= 0.05]
    rest = r.cpu_us - timed
    return f"µs/request: {', '.join(parts)}; HTTP+TLS+loop {rest:.1f} (of {r.cpu_us:.0f})"


def markdown(results: list[Result]) -> str:
    head = ["scenario", "endpoint", "concurrency", "req/s", "p50 ms", "p99 ms"]
    head += ["% of floor", "server µs/req", "RSS MB"]
    rows = [
        [
            r.scenario,
            r.endpoint if r.scenario != "floor" else "(bare aiohttp)",
            f"open {r.rate:.0f}/s" if r.rate else str(r.concurrency),
            ("≥ " if r.scenario == "floor" and r.client_bound else "")
            + f"{r.rps:.0f}"
            + ("*" if r.contended or r.capped else ""),
            f"{r.p50_ms:.2f}",
            f"{r.p99_ms:.2f}",
            r.pct_floor,
            f"{r.cpu_us:.0f}",
            f"{r.rss_mb:.1f}",
        ]
        for r in results
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    numeric = {2, 3, 4, 5, 6, 7, 8}

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
        f"Python {platform.python_version()}, engine {engine_build()}"
    )


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
