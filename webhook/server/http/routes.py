"""What a port answers: requests and answers as plain values, the route table, and an answer
encoded as the one buffer the HTTP layer writes (protocol.py parses and writes; this decides and
formats)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import orjson

from webhook.server.http.state import ServerState

__all__ = ["Answer", "Handler", "Later", "Request", "Routes", "encode_answer", "error"]

log = logging.getLogger("gpu-admission")


# One of each per request. Their __init__ is written out (init=False): compiled, the one
# `dataclass` generates runs as interpreted Python, several times the cost. Never edited after
# they are built.
@dataclass(slots=True, init=False)
class Request:
    method: str
    path: str
    body: bytes | bytearray  # a bytearray when it came in pieces: read in place, never copied

    def __init__(self, method: str, path: str, body: bytes | bytearray) -> None:
        self.method = method
        self.path = path
        self.body = body


@dataclass(slots=True, init=False)
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"
    close: bool = False  # close the connection once this answer is written

    def __init__(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        close: bool = False,
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.close = close


class Later:
    """An answer worked out off the event loop (offload.py): `work` runs on the worker
    thread with the request's body, then `finish` on the loop with what it returned (what
    must stay on the loop: metrics, holds, the log)."""

    __slots__ = ("body", "finish", "future", "work")

    def __init__(
        self,
        body: bytes | bytearray,
        work: Callable[[bytes | bytearray], Any],
        finish: Callable[[Any], Answer],
    ) -> None:
        self.body = body
        self.work = work
        self.finish = finish
        self.future: asyncio.Future[Any] | None = None  # set once the worker has it

    def run(self) -> Any:
        """On the worker thread: the work, handed the body (which it holds from then on)."""
        body, self.body = self.body, b""
        return self.work(body)

    def cancel(self) -> None:
        """Its connection is gone: never decided if still waiting, and its body let go at
        once (a review waiting behind others would otherwise keep it past its budget)."""
        self.body = b""
        if self.future is not None:
            self.future.cancel()


def error(status: int, reason: str, *, close: bool = False) -> Answer:
    return Answer(status, orjson.dumps({"error": reason}), close=close)


# An answer now, or one worked out off the event loop (a review of a large object: offload.py).
Handler = Callable[[Request], Answer | Later]


@dataclass
class Routes:
    """What one port answers, and what runs beside it while it serves (`contexts`: async
    generator functions entered at start and left at stop, like aiohttp's cleanup_ctx)."""

    state: ServerState
    table: dict[str, dict[str, Handler]] = field(default_factory=dict)
    contexts: list[Callable[[], Any]] = field(default_factory=list)
    # The largest body a route here takes; None: the server's --max-body-mib (reviews).
    max_body: int | None = None

    def add(self, method: str, path: str, handler: Handler) -> None:
        self.table.setdefault(path, {})[method] = handler

    def find(self, method: str, path: str) -> Handler | Answer:
        """The handler, or the 404/405 to answer (decided from the head, before any body)."""
        methods = self.table.get(path)
        if methods is None:
            return error(404, "no such path on this port")
        handler = methods.get(method)
        if handler is None and method == "HEAD":  # the GET's answer, headers only
            handler = methods.get("GET")
        if handler is None:
            return error(405, "method not allowed on this path")
        return handler

    def answer(self, request: Request) -> Answer | Later:
        found = self.find(request.method, request.path)
        if isinstance(found, Answer):
            return found
        try:
            return found(request)
        except Exception:  # never a traceback to the client
            log.exception("internal error on %s", request.path)
            return error(500, "internal error in gpu-admission; see the webhook log")


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode()


_STATUS = {s.value: _status_line(s.value) for s in HTTPStatus}


def encode_answer(answer: Answer, close: bool, *, head_only: bool = False) -> bytes:
    """The whole response, status line to body, as one buffer: one write, one TLS record.
    `head_only`: the answer to a HEAD request, its GET's headers without the body."""
    head = _STATUS.get(answer.status) or _status_line(answer.status)
    extra = b"Connection: close\r\n" if close else b""
    return b"%sContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s" % (
        head,
        answer.content_type.encode(),
        len(answer.body),
        extra,
        b"" if head_only else answer.body,
    )
