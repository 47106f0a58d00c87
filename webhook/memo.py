"""Memoizing on an immutable object's identity (a rule set, the facts' node list).

Rule sets and node lists are replaced whole, never edited, so whatever is derived from one can
be kept as long as that very object is in use. The cache holds a reference to the object, so
its id cannot be reused by a new one while the entry lives; it is bounded, so old rule sets do
not pile up across reloads.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import wraps
from typing import Any, TypeVar

__all__ = ["by_identity"]

R = TypeVar("R")


def by_identity(size: int = 8) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Cache `fn(obj, *args)` per (id(obj), args); `args` must be hashable."""

    def decorate(fn: Callable[..., R]) -> Callable[..., R]:
        cache: dict[tuple[int, tuple[Hashable, ...]], tuple[Any, R]] = {}

        @wraps(fn)
        def cached(obj: Any, *args: Hashable) -> R:
            key = (id(obj), args)
            hit = cache.get(key)
            if hit is not None and hit[0] is obj:
                return hit[1]
            value = fn(obj, *args)
            if len(cache) >= size:
                cache.clear()
            cache[key] = (obj, value)
            return value

        return cached

    return decorate
