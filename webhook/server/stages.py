"""Where a review's server time goes, stage by stage (`serve --profile-stages`).

Off by default, and then free but for a no-op call per stage. On, each review's handler laps a
stopwatch between its stages; the engine's pod views and patch diff are timed through
wrappers installed at start-up, so the engine itself holds no timing code. `GET
/debug/stages` returns the totals since start: bench/load.py --profile reads them around each
run and puts the rest of the server's CPU time down to HTTP, TLS and the event loop.

The stopwatch starts once the body is read (waiting for the network is not work), and the
handler runs without an await from there to its answer, so one review is timed at a time.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

__all__ = ["OFF", "STAGES", "StageTotals", "Stopwatch", "Watch"]

# In the order a review passes through them.
STAGES = ("decode", "prefilter", "facts", "views", "engine", "diff", "encode", "metrics", "hold")

_clock = time.perf_counter


class Watch:
    """What the handler laps: a real stopwatch, or `OFF`."""

    def lap(self, stage: str) -> None:
        """The time since the previous lap belongs to `stage`."""


OFF = Watch()


class Stopwatch(Watch):
    __slots__ = ("carved", "last", "totals")

    def __init__(self, totals: dict[str, float]) -> None:
        self.totals = totals
        self.last = _clock()
        self.carved = 0.0  # time of nested stages inside the lap under way

    def lap(self, stage: str) -> None:
        now = _clock()
        self.totals[stage] += now - self.last - self.carved
        self.last, self.carved = now, 0.0

    def carve(self, stage: str, seconds: float) -> None:
        """A nested stage (views inside the engine): its own, and not its parent's."""
        self.totals[stage] += seconds
        self.carved += seconds


class StageTotals:
    """Seconds per stage and reviews timed, since the server started."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.reviews = 0
        self.current: Stopwatch | None = None

    def start(self) -> Stopwatch:
        self.reviews += 1
        self.current = Stopwatch(self.totals)
        return self.current

    def timed(self, fn: Callable[..., Any], stage: str) -> Callable[..., Any]:
        """`fn`, its time carved out of the lap under way as `stage`."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = _clock()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.current is not None:
                    self.current.carve(stage, _clock() - started)

        return wrapper

    def install(self) -> None:
        """Time the engine's pod views and patch diff from the outside. Not in the compiled
        engine, whose modules call each other directly: there they count as `engine`."""
        from webhook.engine import pipeline
        from webhook.engine.build import engine_build

        if engine_build() == "mypyc":
            return

        pipeline.pod_views = self.timed(pipeline.pod_views, "views")
        pipeline.diff = self.timed(pipeline.diff, "diff")

    def report(self) -> dict[str, object]:
        """GET /debug/stages: reviews timed, and seconds per stage."""
        return {"reviews": self.reviews, "seconds": {s: self.totals[s] for s in STAGES}}
