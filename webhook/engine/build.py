"""Which build of the engine is running: compiled by mypyc (setup.py; the image ships it) or
plain Python. Logged at start-up and printed by the benchmarks, so a number is never read
against the wrong build."""

from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES

from webhook.engine import pipeline

__all__ = ["engine_build"]


def engine_build() -> str:
    """The running build: "mypyc" when the engine's modules are compiled extensions, else
    "python"."""
    where = pipeline.__file__ or ""
    return "mypyc" if where.endswith(tuple(EXTENSION_SUFFIXES)) else "python"
