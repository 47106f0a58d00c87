"""CEL text for the exported policies: literals, name tests, and reading a quantity.

Only what the apiserver's CEL environment offers is used: the core language, cel-go's
strings and lists extensions (`join`, `replace`, `lists.range`, `flatten`, `sort`; lists
version 3 is in Kubernetes since 1.34) and Kubernetes' quantity library (`isQuantity`,
`quantity`, `isInteger`, `sign`, `compareTo`, `asInteger`, `asApproximateFloat`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from webhook.selectors import LabelSelector, is_pattern

__all__ = ["glob_re2", "name_test", "q", "qlist", "quantity_of", "selector_test", "shown"]


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
    """CEL that is true when the string `var` is one of the names or matches a pattern."""
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
    return "(" + " || ".join(tests) + ")" if tests else "false"


def quantity_of(value: str) -> str:
    """A resource amount as a Kubernetes quantity. Built-in kinds hold quantities as strings;
    a CRD may hold an integer (int-or-string) or, without a schema, a number: `string()` of
    either spells a quantity. Guard with `isQuantity(string(v))` first."""
    return f"quantity(string({value}))"


def shown(value: str) -> str:
    """A count for a message, as the webhook shows it: `2`, or `0.5` when it is not whole."""
    amount = quantity_of(value)
    return (
        f"({amount}.isInteger() ? string({amount}.asInteger())"
        f" : string({amount}.asApproximateFloat()))"
    )


def selector_test(labels: str, selector: LabelSelector) -> str:
    """CEL that is true when the label map `labels` matches the selector, as
    `LabelSelector.matches` reads it (an empty selector matches everything)."""
    tests = [
        f"({q(k)} in {labels} && {labels}[{q(k)}] == {q(v)})"
        for k, v in selector.match_labels.items()
    ]
    for e in selector.match_expressions:
        has, value = f"{q(e.key)} in {labels}", f"{labels}[{q(e.key)}]"
        tests.append(
            {
                "Exists": f"({has})",
                "DoesNotExist": f"!({has})",
                "In": f"({has} && {value} in {qlist(e.values)})",
                "NotIn": f"(!({has}) || !({value} in {qlist(e.values)}))",
            }[e.operator]
        )
    return "(" + " && ".join(tests) + ")" if tests else "true"
