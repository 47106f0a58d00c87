"""What each client may cost: the limits (`serve` flags) and the sizes and times behind them.

Values only, so the command line reads the defaults without starting anything; the state that
enforces them, shared by both ports, is state.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024
# The apiserver caps objects at ~1.5 MiB in etcd; 8 MiB leaves room for oldObject and options.
MAX_BODY = 8 * MiB
# Bodies up to this size (a pod review is 5-50 KiB) are read without asking the shared budget,
# so stalled large uploads can never crowd out ordinary reviews.
SMALL_BODY = 128 * 1024
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
