"""What each client may cost, and the shared state that keeps it so: the limits (`serve`
flags), the large-body budget, when memory is handed back to the OS (how: process.py), and
the draining flag.

Both ports share one `ServerState`; the connection layer and the body reader enforce it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from prometheus_client import Counter

from webhook.server import process

# Every cut, wherever a limit is enforced: the listener's cap and sweep, a connection's parser.
CUT = Counter(
    "gpu_admission_clients_cut_total",
    "Connections or requests cut to keep each client's work bounded, by reason "
    "(connection_cap, evicted_<phase>, header_timeout, request_timeout, body_timeout, "
    "body_too_large, body_budget, head_too_large, bad_request, no_route, unread_answers, "
    "internal_error, shutdown).",
    ["reason"],
)

MiB = 1024 * 1024
# The apiserver caps objects at ~1.5 MiB in etcd; 8 MiB leaves room for oldObject and options.
MAX_BODY = 8 * MiB
# Bodies up to this size (a pod review is 5-50 KiB) are read without asking the shared budget,
# so stalled large uploads can never crowd out ordinary reviews.
SMALL_BODY = 128 * 1024
# After a body this large, glibc is asked to hand freed pages back (malloc_trim), at most
# once per TRIM_INTERVAL seconds: without it, RSS stays at its high-water mark.
TRIM_AFTER = 1 * MiB
TRIM_INTERVAL = 0.5
# A request that has its body still has this long to be answered and written out: a client
# that does not read its answer would otherwise hold its connection forever.
RESPONSE_GRACE = 5.0


@dataclass(frozen=True)
class Limits:
    """What clients may cost the server; `serve` flags. The defaults fit the Deployment's
    256 MiB: the ~55 MiB baseline, 256 connections each holding a head or a small body (128 KiB
    at most, 32 MiB in all) and a TLS read buffer (256 KiB while data streams in, 64 MiB in
    all), and the 64 MiB large-body budget (docs/threat-model.md)."""

    max_body: int = MAX_BODY
    body_memory: int = 64 * MiB
    max_connections: int = 256
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    # Longer than the Go client's 90 s idle timeout (the apiserver's), so the client closes an
    # idle connection first and never sends a request into one the server is closing.
    idle_timeout: float = 120.0
    # After a 413, unread body is read and dropped for this long, so the client gets to read
    # the answer instead of a reset; then the connection closes.
    linger: float = 2.0
    # At the connection cap, a connection still sending its body after this long may be cut to
    # make room: the apiserver sends a review in one go, so a body that trickles is a client
    # holding a slot (without this, a few hundred trickling bodies would lock the apiserver
    # out until the body timeout, and the next wave would do it again).
    stalled_body: float = 1.0

    @property
    def request_timeout(self) -> float:
        return self.body_timeout + RESPONSE_GRACE


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
