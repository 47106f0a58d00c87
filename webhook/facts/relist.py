"""A relist being read: one kind's objects reduced page by page into the values its store keeps,
handed to the store whole when the list is complete (never half a list)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from webhook.facts.stores import Item, NodeStore

__all__ = ["reduced"]

Page = tuple[list[dict[str, Any]], dict[str, Any]]


def reduced(
    kind: str,
    reduce: Callable[[str, dict[str, Any], NodeStore], Item | None],
    nodes: NodeStore,
    pages: Iterable[Page],
) -> tuple[list[Item], int, str]:
    """(the kept objects' items, how many objects were read, the list's resourceVersion).

    Pods are reduced to summaries as each page arrives, so memory holds one page of objects
    and the summaries, not the cluster.
    """
    items: list[Item] = []
    count, version = 0, ""
    for objects, meta in pages:
        for obj in objects:
            item = reduce(kind, obj, nodes)
            if item is not None:
                items.append(item)
        count += len(objects)
        version = str(meta.get("resourceVersion", ""))
    return items, count, version
