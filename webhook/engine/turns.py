"""Where a long review lets other threads run: `give_way`.

The server decides a review of a large object on a worker thread (server/http/offload.py), so
its event loop keeps answering probes and small reviews meanwhile. Threads share the GIL, and a
thread that asks for it gets it only when the holder passes through the interpreter's eval loop:
compiled code (setup.py) never does, so without these points a worker deciding a 3 MiB object
would hold the loop off for its whole run. This module stays interpreted on purpose
(tests/engine/test_review_work.py checks it): each call enters the eval loop, where a thread
that has waited longer than the switch interval (5 ms) takes its turn. The engine calls it where
a review's work grows with its size (per container read, per finding, per rule over a pod spec
with many containers); with no thread waiting, a call costs ~50 ns and does nothing else.
"""

from __future__ import annotations

__all__ = ["give_way"]


def give_way() -> None:
    """Nothing: being called from compiled code is what lets a waiting thread in."""
