"""What both ports share while they serve: the limits in force, the large-body budget, when
memory is handed back to the OS (how: webhook/server/process.py), the draining flag, and the
count of clients cut.

The connection layer and the body reader enforce it.
"""

from __future__ import annotations

import asyncio

from prometheus_client import Counter

from webhook.server import process
from webhook.server.http.limits import Limits, MiB

# Every cut, wherever a limit is enforced: the listener's cap and sweep, a connection's parser.
CUT = Counter(
    "gpu_admission_clients_cut_total",
    "Connections or requests cut to keep each client's work bounded, by reason "
    "(connection_cap, evicted_<phase>, header_timeout, request_timeout, body_timeout, "
    "body_too_large, body_budget, head_too_large, bad_request, no_route, unread_answers, "
    "internal_error, shutdown).",
    ["reason"],
)

# After a body this large, glibc is asked to hand freed pages back (malloc_trim), at most
# once per TRIM_INTERVAL seconds: without it, RSS stays at its high-water mark.
TRIM_AFTER = 1 * MiB
TRIM_INTERVAL = 0.5


class ServerState:
    """What both ports share: limits, the large-body budget, and whether shutdown began."""

    def __init__(self, limits: Limits | None = None, *, release_memory: bool = True) -> None:
        self.limits = limits or Limits()
        self.draining = False  # SIGTERM seen: /readyz fails, answers say Connection: close
        self.body_bytes = 0  # large-body bytes promised to requests being read or handled
        self._trim = process.malloc_trim() if release_memory else None
        self._trim_pending = False
        self._trimmed_at = float("-inf")

    def take(self, n: int) -> bool:
        """Promise `n` more bytes of large body, if the budget has them."""
        if self.body_bytes + n > self.limits.body_memory:
            return False
        self.body_bytes += n
        return True

    def give(self, n: int) -> None:
        self.body_bytes -= n
        if n >= TRIM_AFTER:
            self._trim_soon()

    def _trim_soon(self) -> None:
        """Hand freed memory back to the OS soon, after the body's last reference is gone."""
        if self._trim is None or self._trim_pending:
            return
        loop = asyncio.get_running_loop()
        self._trim_pending = True
        loop.call_later(max(0.0, self._trimmed_at + TRIM_INTERVAL - loop.time()), self._trim_now)

    def _trim_now(self) -> None:
        self._trim_pending = False
        self._trimmed_at = asyncio.get_running_loop().time()
        if self._trim is not None:
            self._trim(0)
