"""Name patterns as rule files write them: exact names and shell-style globs (`team-*`).

Apart from the label selectors (selectors.py, rule-file models) so that this module can be
compiled with the engine: a review asks whether a resource name is a GPU and whether its
namespace is exempt, both here.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

__all__ = ["NamePatterns", "is_pattern", "matches_any"]


def is_pattern(name: str) -> bool:
    return any(ch in name for ch in "*?[")


class NamePatterns:
    """Exact names and shell-style patterns (`team-*`, `nvidia.com/mig-*`), compiled once.

    Exact names are a set lookup; the patterns are one regex alternation.
    """

    def __init__(self, patterns: Iterable[str]) -> None:
        patterns = list(patterns)
        self.exact: frozenset[str] = frozenset(p for p in patterns if not is_pattern(p))
        loose = [fnmatch.translate(p) for p in patterns if is_pattern(p)]
        self.loose: re.Pattern[str] | None = re.compile("|".join(loose)) if loose else None

    def matches(self, name: str) -> bool:
        if name in self.exact:
            return True
        loose = self.loose
        return loose is not None and loose.match(name) is not None


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    """One-off match of a name against patterns; hot paths keep a `NamePatterns` instead."""
    return NamePatterns(patterns).matches(name)
