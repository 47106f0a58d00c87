"""One structured INFO line with no LogRecord: what every judged review logs.

Compiled with the engine (setup.py); the handler and formatter it writes through are
logs.py's, which extend the logging module's classes and so stay interpreted.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import orjson

from webhook.logs import JsonFormatter, json_lines

__all__ = ["info_line"]


def _alone(logger: logging.Logger, handler: logging.Handler) -> bool:
    """Whether a record of `logger` would reach `handler` and nothing else, unfiltered: the
    configuration `setup` made, not one a test or an embedding program changed since."""
    root = logging.root
    node: logging.Logger | None = logger
    while node is not None and node is not root:  # "gpu-admission.decisions", "gpu-admission"
        if node.handlers or node.filters or not node.propagate:
            return False
        node = node.parent
    return (
        node is root
        and root.handlers == [handler]
        and not root.filters
        and not handler.filters
        and logging.getLogRecordFactory() is logging.LogRecord
    )


def info_line(logger: logging.Logger, message: str, fields: dict[str, Any]) -> None:
    """One INFO line of `logger` carrying `fields` as structured keys (the JSON format's
    `extra`), when INFO is enabled for it.

    Under `setup`'s JSON handler alone the line is made as its formatter would make it, with
    no LogRecord, and queued (`JsonLines`): the standard library's record, handler chain and
    formatter, and a write per line, cost a denied review more than the rest of its answer.
    Any other configuration goes through `logging` as usual."""
    if not logger.isEnabledFor(logging.INFO):
        return
    handler = json_lines()
    if handler is None or not _alone(logger, handler):
        logger.info("%s", message, extra=fields)
        return
    formatter = handler.formatter
    assert isinstance(formatter, JsonFormatter)
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
    with handler.lock or contextlib.nullcontext():
        handler.queue(text)
