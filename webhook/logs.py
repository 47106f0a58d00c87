"""Logging set-up: plain text on a terminal, one JSON object per line in a cluster.

Decision lines carry their fields (uid, kind, namespace, findings) as structured keys, so a
log pipeline can filter shadow-mode findings without parsing message text. A denial storm (a
misconfigured controller retrying) writes one line per review, so a line costs little: no
caller lookup, no thread or process names, the timestamp's seconds formatted once a second,
and (`loglines.info_line`) no LogRecord at all while the JSON handler `setup` installed is
the only one listening.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from typing import Any

import orjson

__all__ = ["JsonFormatter", "JsonLines", "json_lines", "setup"]

_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._stamp = ""

    def timestamp(self, created: float, msecs: float) -> str:
        second = int(created)
        if second != self._second:  # one strftime a second, not one a line
            self._second = second
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._stamp}.{int(msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": self.timestamp(record.created, record.msecs),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = record.__dict__
        extra = fields.keys() - _STANDARD  # the `extra` keys, found by one set difference
        if extra:
            for key in fields:  # in the order the caller gave them
                if key in extra and not key.startswith("_"):
                    line[key] = fields[key]
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class JsonLines(logging.StreamHandler):
    """stderr, one JSON object per line. Lines `loglines.info_line` hands it directly are
    queued and written together once per turn of the event loop (one write instead of one per
    review in a denial storm), always ahead of any line logged after them, so the order holds.
    At most `_MAX_QUEUED` wait; a line queued where no loop runs is written at once."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(JsonFormatter())
        self._queued: list[str] = []
        self._drain_on: asyncio.AbstractEventLoop | None = None  # the loop a drain waits on

    def queue(self, text: str) -> None:
        """Queue one formatted line; the caller holds the lock."""
        self._queued.append(text)
        if len(self._queued) >= _MAX_QUEUED:
            self._write_queued()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (the CLI): written at once
            self._write_queued()
            return
        if self._drain_on is not loop:  # none waiting, or on a loop that has gone since
            self._drain_on = loop
            loop.call_soon(self._drain)

    def _drain(self) -> None:
        with self.lock or contextlib.nullcontext():
            self._drain_on = None
            self._write_queued()

    def _write_queued(self) -> None:
        """Write what is queued; a closed or broken stderr drops it (nowhere left to say so)."""
        if not self._queued:
            return
        text = "".join(self._queued)
        self._queued.clear()
        with contextlib.suppress(Exception):
            self.stream.write(text)
            super().flush()

    def emit(self, record: logging.LogRecord) -> None:
        self._write_queued()  # the lock is held (Handler.handle)
        super().emit(record)

    def flush(self) -> None:
        with self.lock or contextlib.nullcontext():
            self._write_queued()
            super().flush()


# At most this many lines wait for the loop's turn to end; then they are written at once.
_MAX_QUEUED = 256


def setup(level: str, fmt: str) -> None:
    # Nothing we print reads where a call came from, or which thread or process made it
    # (the logging HOWTO's "Optimization"): a record is cheaper without them.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    global _direct
    handler: logging.Handler
    if fmt == "json":
        handler = _direct = JsonLines()
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        _direct = None
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


# The JSON handler `setup` installed: what `loglines.info_line` writes through.
_direct: JsonLines | None = None


def json_lines() -> JsonLines | None:
    """The JSON handler `setup` installed (None: the text format, or not set up)."""
    return _direct
