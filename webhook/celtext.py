"""CEL text both generators write: the webhook configurations' matchConditions
(`rulecli/routingcel.py`) and the native policies (`export/`). One spelling of a string literal,
a list of them, a shell-style name pattern as RE2, and "this name is one of these".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from webhook.namepatterns import is_pattern

__all__ = ["glob_re2", "name_test", "q", "qlist"]


def q(text: str) -> str:
    """A CEL string literal (JSON's escaping is valid CEL)."""
    return "'" + json.dumps(text)[1:-1].replace("'", "\\'") + "'"


def qlist(items: Iterable[str]) -> str:
    return "[" + ", ".join(q(i) for i in items) + "]"


def glob_re2(pattern: str) -> str:
    """A shell-style pattern (as `fnmatch` reads it) as an anchored RE2 regex for `matches`."""
    out, i = ["^"], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out) + "$"


def name_test(var: str, patterns: Iterable[str]) -> str:
    """CEL that is true when the string `var` is one of the names or matches a pattern:
    `a || b || ...`, or `false` for none. Prefix and suffix patterns become `startsWith` and
    `endsWith`, cheaper than a regex."""
    patterns = list(dict.fromkeys(patterns))
    exact = sorted(p for p in patterns if not is_pattern(p))
    tests = [f"{var} in {qlist(exact)}"] if exact else []
    for p in sorted(p for p in patterns if is_pattern(p)):
        head = p[:-1]
        if p.endswith("*") and not is_pattern(head):
            tests.append(f"{var}.startsWith({q(head)})")
        elif p.startswith("*") and not is_pattern(p[1:]):
            tests.append(f"{var}.endsWith({q(p[1:])})")
        else:
            tests.append(f"{var}.matches({q(glob_re2(p))})")
    return " || ".join(tests) or "false"
