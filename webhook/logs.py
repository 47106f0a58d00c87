"""Logging set-up: plain text on a terminal, one JSON object per line in a cluster.

Decision lines carry their fields (uid, kind, namespace, findings) as structured keys, so a
log pipeline can filter shadow-mode findings without parsing message text. A denial storm (a
misconfigured controller retrying) writes one line per review, so a line costs little: no
caller lookup, no thread or process names, the timestamp's seconds formatted once a second,
and (`info_line`) no LogRecord at all while the JSON handler `setup` installed is the only
one listening.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Any

import orjson

__all__ = ["JsonFormatter", "info_line", "setup"]

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
    global _direct
    formatter = handler.formatter
    _direct = (handler, formatter) if isinstance(formatter, JsonFormatter) else None


# The JSON handler `setup` installed, and its formatter: what `info_line` writes through.
_direct: tuple[logging.StreamHandler[Any], JsonFormatter] | None = None


def _alone(logger: logging.Logger, handler: logging.Handler) -> bool:
    """Whether a record of `logger` would reach `handler` and nothing else, unfiltered: the
    configuration `setup` made, not one a test or an embedding program changed since."""
    root = logging.root
    return (
        not logger.handlers
        and not logger.filters
        and logger.propagate
        and logger.parent is root
        and root.handlers == [handler]
        and not root.filters
        and not handler.filters
        and logging.getLogRecordFactory() is logging.LogRecord
    )


def info_line(logger: logging.Logger, message: str, fields: dict[str, Any]) -> None:
    """One INFO line of `logger` carrying `fields` as structured keys (the JSON format's
    `extra`), when INFO is enabled for it.

    Under `setup`'s JSON handler alone the line is written as the formatter would write it,
    with no LogRecord: the standard library's record, handler chain and formatter cost a
    denied review more than the rest of its answer. Any other configuration goes through
    `logging` as usual."""
    if not logger.isEnabledFor(logging.INFO):
        return
    direct = _direct
    if direct is None or not _alone(logger, direct[0]):
        logger.info("%s", message, extra=fields)
        return
    handler, formatter = direct
    now = time.time()
    line: dict[str, Any] = {
        "ts": formatter.timestamp(now, int((now - int(now)) * 1000)),
        "level": "info",
        "logger": logger.name,
        "msg": message,
    }
    for key, value in fields.items():
        if not key.startswith("_"):
            line[key] = value
    text = orjson.dumps(line, default=str).decode() + handler.terminator
    try:
        with handler.lock or contextlib.nullcontext():
            handler.stream.write(text)
            handler.flush()
    except Exception:  # a closed or broken stream: logging's own error handling says so
        logger.info("%s", message, extra=fields)
