"""A status line on stderr while a long audit runs, so a terminal never looks hung.

Only on a terminal, and only once a run has taken a second: short runs and CI logs stay
clean. Anything written to the report stream first wipes the line (the report and the
status may share one terminal).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO, TypeVar, cast

__all__ = ["Progress", "progress_for"]

T = TypeVar("T")

DELAY = 1.0  # seconds before the first status line
EVERY = 0.2  # seconds between redraws


class Progress:
    """Counters shown as one redrawn line: "listed 1500, audited 700, skipped 12"."""

    def __init__(
        self,
        stream: TextIO | None,
        *,
        delay: float = DELAY,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._clock = clock
        self._every = every
        self._due = clock() + delay
        self._shown = False
        self.counts: dict[str, int] = {}

    def bump(self, counter: str, by: int = 1) -> None:
        """Count one more of `counter` and redraw when it is time."""
        self.counts[counter] = self.counts.get(counter, 0) + by
        if self._stream is None:
            return
        now = self._clock()
        if now >= self._due:
            self._due = now + self._every
            text = ", ".join(f"{name} {n}" for name, n in self.counts.items())
            self._stream.write(f"\r{text}...\x1b[K")
            self._stream.flush()
            self._shown = True

    def clear(self) -> None:
        """Wipe the status line, if one is drawn."""
        if self._shown and self._stream is not None:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False

    def track(self, items: Iterable[T], name: Callable[[T], str]) -> Iterator[T]:
        """`items`, each counted under `name(item)` once the consumer is done with it."""
        try:
            for item in items:
                yield item
                self.bump(name(item))
        finally:
            self.clear()

    def guard(self, out: TextIO) -> TextIO:
        """`out`, wiping the status line before each write to it."""
        return out if self._stream is None else cast(TextIO, _Guarded(out, self))


class _Guarded:
    """Enough of a text stream for print() and write(): clears the status line first."""

    def __init__(self, out: TextIO, progress: Progress) -> None:
        self._out = out
        self._progress = progress

    def write(self, text: str) -> int:
        self._progress.clear()
        return self._out.write(text)

    def flush(self) -> None:
        self._out.flush()

    def isatty(self) -> bool:
        return self._out.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._out, name)


def progress_for(stderr: TextIO) -> Progress:
    """A Progress that draws on `stderr` only when it is a terminal."""
    return Progress(stderr if stderr.isatty() else None)
