"""The large-body budget: a body over SMALL_BODY draws on it while it is read and handled, so
a crowd of stalled uploads gets 503s instead of the memory limit."""

from __future__ import annotations

from webhook.server.http.limits import SMALL_BODY
from webhook.server.http.state import ServerState


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
