"""Where each setting of a rule folder was written, kept as a tree while files are laid over
each other (`files._layer`).

Layering forgets what a later file replaces and takes over what it writes, a subtree at a
time: one list item, one key's value. In a flat table of field paths each of those was a walk
over every entry, so two files of 24k exempt namespaces cost 24k walks of 24k entries (35 s
of `rules check`). In a tree a subtree is found in as many steps as its path is long, dropped
at once, and taken over by moving it, so laying files costs what reading them did.
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["LineTree"]

Key = str | int
W = TypeVar("W")


class LineTree(Generic[W]):
    """A node: where its own path was written (None: no file wrote it), and its children."""

    __slots__ = ("kids", "where")

    def __init__(self) -> None:
        self.where: W | None = None
        self.kids: dict[Key, LineTree[W]] = {}

    @classmethod
    def of(cls, flat: dict[tuple[Key, ...], W]) -> LineTree[W]:
        """The tree of a flat table, in one pass over it."""
        root: LineTree[W] = cls()
        for path, where in flat.items():
            root.make(path).where = where
        return root

    def find(self, path: tuple[Key, ...]) -> LineTree[W] | None:
        node = self
        for key in path:
            below = node.kids.get(key)
            if below is None:
                return None
            node = below
        return node

    def make(self, path: tuple[Key, ...]) -> LineTree[W]:
        """The node at `path`, made with every node above it where missing."""
        node = self
        for key in path:
            below = node.kids.get(key)
            if below is None:
                below = node.kids[key] = LineTree()
            node = below
        return node

    def forget(self, path: tuple[Key, ...]) -> None:
        """Drop `path` and everything below it."""
        parent = self.find(path[:-1])
        if parent is not None:
            parent.kids.pop(path[-1], None)

    def graft(self, path: tuple[Key, ...], subtree: LineTree[W] | None) -> None:
        """Put `subtree` at `path` (moved, not copied: the tree it came from is done with),
        in place of anything there."""
        if subtree is None:
            self.forget(path)
        else:
            self.make(path[:-1]).kids[path[-1]] = subtree

    def flat(self) -> dict[tuple[Key, ...], W]:
        """The flat table again: field path -> where, for every path a file wrote."""
        out: dict[tuple[Key, ...], W] = {}
        todo: list[tuple[tuple[Key, ...], LineTree[W]]] = [((), self)]
        while todo:  # a stack, not recursion: depth is bounded, but a stack costs nothing
            path, node = todo.pop()
            if node.where is not None and path:
                out[path] = node.where
            todo.extend(((*path, key), kid) for key, kid in reversed(node.kids.items()))
        return out
