"""Process-wide tuning of the garbage collector and the C allocator, all in one place: what
`serve` sets once at start-up, after a pods relist, and after a large body is answered.

Each is only an optimisation: where glibc is missing (musl, macOS) the allocator calls do
nothing, and the server answers the same.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable
from typing import cast

__all__ = ["freeze_after_relist", "freeze_heap", "malloc_trim", "map_large_buffers"]

MiB = 1024 * 1024

# glibc's mallopt parameters. Buffers of 1 MiB or more (large bodies) are mapped on their own;
# the heap top is trimmed past 2 MiB free, glibc's own ratio. Lower thresholds cost every
# request: a TLS read allocates a 256 KiB buffer, which would then be mapped and unmapped
# (or the heap grown and trimmed) each time, ~25% more CPU per review.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 1 * MiB
TRIM_THRESHOLD = 2 * MiB

# The young generation is collected after this many allocations, not CPython's 700:
# per-request garbage (a parsed object is a few hundred dicts) then rarely starts a walk.
YOUNG_THRESHOLD = 20_000


def malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, which hands freed heap pages back to the OS, or None (musl,
    macOS). The server calls it after a large body is answered (`ServerState.give`)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return cast(Callable[[int], int], trim)


def map_large_buffers() -> bool:
    """Have glibc map every buffer of 1 MiB or more on its own, so freeing one gives its
    memory straight back to the OS. glibc's default threshold grows (up to 32 MiB) after the
    first large free, after which body buffers and TLS reads come from the heap and RSS stays
    at its high-water mark (bench/abuse.py, stalled uploads; figures in docs/threat-model.md).
    Process-wide, so `serve` calls it, not the app."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def freeze_heap() -> None:
    """At start-up, once the rules and facts are loaded: everything so far lives as long as
    the process, so take it out of the cyclic GC's sight, and collect the young generation
    less often, so per-request garbage does not trigger walks over the whole heap."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 20, 20)


def freeze_after_relist(kind: str) -> None:
    """After a pods relist: 100k summaries are long-lived, so move them out of the cyclic GC's
    sight, or every full collection walks them all and shows as a p99 spike in admission."""
    if kind == "pods":
        gc.collect()
        gc.freeze()
