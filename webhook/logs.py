"""Logging set-up: plain text on a terminal, one JSON object per line in a cluster.

Decision lines carry their fields (uid, kind, namespace, findings) as structured keys, so a
log pipeline can filter shadow-mode findings without parsing message text. A denial storm (a
misconfigured controller retrying) writes one line per review, so a line costs little: no
caller lookup, no thread or process names, the timestamp's seconds formatted once a second.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

__all__ = ["JsonFormatter", "setup"]

_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._stamp = ""

    def _timestamp(self, created: float, msecs: float) -> str:
        second = int(created)
        if second != self._second:  # one strftime a second, not one a line
            self._second = second
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._stamp}.{int(msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": self._timestamp(record.created, record.msecs),
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


def setup(level: str, fmt: str) -> None:
    # Nothing we print reads where a call came from, or which thread or process made it
    # (the logging HOWTO's "Optimization"): a record is cheaper without them.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
