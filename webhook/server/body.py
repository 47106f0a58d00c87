"""Reading a request body within the size limit, the large-body budget and the body timeout;
a body over SMALL_BODY draws on the budget, so a crowd of stalled uploads gets 503s instead of
the memory limit."""

from __future__ import annotations

from typing import cast

from aiohttp import web

from webhook.server.connections import BodyTimeout, Connection
from webhook.server.limits import SMALL_BODY, ServerState


class Refused(Exception):
    """A request cut to bound its cost: answered with `status`, and its connection closed."""

    def __init__(self, status: int, reason: str, metric: str, *, linger: bool = True) -> None:
        super().__init__(reason)
        self.status = status
        self.metric = metric
        self.linger = linger  # False: close right after the answer, read no more of the body


class Lease:
    """The share of the large-body budget one request holds, given back when it is answered."""

    __slots__ = ("held", "state")

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.held = 0

    def cover(self, size: int) -> None:
        if size <= SMALL_BODY or size <= self.held:
            return
        if not self.state.take(size - self.held):
            # No lingering over the rest: under this pressure, reading and dropping megabytes
            # per refused request is the work an attacker wants the server to do.
            raise Refused(
                503,
                "busy: too many large request bodies in flight; try again",
                "body_budget",
                linger=False,
            )
        self.held = size

    def release(self) -> None:
        if self.held:
            self.state.give(self.held)
            self.held = 0


async def read_body(request: web.Request, state: ServerState, lease: Lease) -> bytes:
    """The body, within the size limit, the budget and the body timeout, or `Refused`.

    The usual one-chunk body comes back as the very chunk received; larger ones grow one
    buffer (no second copy, unlike `request.read()`), which the decoder reads as it is. The
    body timeout is kept by the listener's once-a-tick sweep, which fails an overdue body's
    stream, rather than by a timer per request (`asyncio.timeout` costs ~5 µs a request).
    """
    limits = state.limits
    too_large = f"request body over {limits.max_body} bytes"
    length = request.content_length
    if length is not None:  # refused before a byte of it is read
        if length > limits.max_body:
            raise Refused(413, too_large, "body_too_large")
        lease.cover(length)
    content = request.content
    conn = request.protocol if isinstance(request.protocol, Connection) else None
    first = b""
    buffer: bytearray | None = None
    total = 0
    try:
        if conn is not None:
            conn.body = content
        while chunk := await content.readany():
            total += len(chunk)
            if total > limits.max_body:  # chunked: cut at the limit
                raise Refused(413, too_large, "body_too_large")
            lease.cover(total)
            if buffer is not None:
                buffer += chunk
            elif not first:
                first = chunk
            else:
                buffer = bytearray(first)
                buffer += chunk
                first = b""
    except BodyTimeout:
        raise Refused(
            408,
            f"request body not received within {limits.body_timeout:g} s",
            "body_timeout",
            linger=False,
        ) from None
    finally:
        if conn is not None:
            conn.body = None
    # A bytearray is read by the decoder in place; typed as bytes, which it stands in for.
    return first if buffer is None else cast(bytes, buffer)
