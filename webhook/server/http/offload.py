"""Reviews of large objects are decided on a worker thread, so the event loop keeps answering
probes and small reviews while one is computed.

A review's work grows with its object (bench/worst_shapes.py): a 3 MiB object, the most the
apiserver sends, of the worst shape takes up to a second to decide. On the event loop that
second would hold every other request of the replica, `/healthz` included, and a tenant can
send such objects in dry runs that store nothing. An ordinary review (5-50 KiB) is decided on
the loop, where it costs least; a body over OFFLOAD_BODY is decided on one worker thread, one
review at a time, its answer written from the loop. The engine gives the GIL way while it works
(`webhook.engine.turns`), so the loop gets its turn every few tens of milliseconds at most even
while compiled code decides (bench/worst_shapes.py measures the longest wait).

The cyclic garbage collector is off while the worker decides: the objects of a large review
(a million or more) all live until it ends, so each full collection walks them all, in C,
holding the GIL for hundreds of milliseconds, and the collections together cost more than the
review. They hold no reference cycles, so reference counting frees them when it ends.
"""

from __future__ import annotations

import asyncio
import gc
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from webhook.server.http.body import Lease
from webhook.server.http.routes import Later, Request

__all__ = ["OFFLOAD_BODY", "Queued", "run", "start"]

# Bodies larger than this are decided off the loop. The worst shape costs ~0.3 µs a byte per
# review compiled (bench/worst_shapes.py), so a review the loop decides itself holds it ~20 ms
# at most; ordinary reviews stay well below and never pay the hand-over (~50 µs).
OFFLOAD_BODY = 64 * 1024


class Queued:
    """A request not answered yet, with what answering it needs: the share of the body budget
    its body holds, and what its own head said (the parser may be on a later one by then)."""

    __slots__ = ("head_only", "keep_alive", "lease", "request")

    def __init__(self, request: Request, lease: Lease, keep_alive: bool) -> None:
        self.request = request
        self.lease = lease
        self.head_only = request.method == "HEAD"
        self.keep_alive = keep_alive


_worker: ThreadPoolExecutor | None = None


def start(later: Later) -> asyncio.Future[Any]:
    """Run `later` on the worker thread (one review at a time: a second waits for the first,
    so the loop keeps its share of the CPU whatever arrives); `later.cancel()` drops one still
    waiting."""
    global _worker
    if _worker is None:
        _worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="large-review")
    later.future = asyncio.get_running_loop().run_in_executor(_worker, run, later)
    return later.future


def run(later: Later) -> Any:
    """On the worker thread: the review, with the garbage collector off (the module says why;
    process-wide, so the loop's small reviews leave their little cyclic garbage until it
    ends), then as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        return later.run()
    finally:
        if was:
            gc.enable()
