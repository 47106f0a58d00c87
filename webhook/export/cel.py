"""CEL text for the exported policies: literals, name tests, and reading a quantity.

Only what the apiserver's CEL environment offers is used: the core language, cel-go's
strings and lists extensions (`join`, `replace`, `lists.range`, `flatten`, `sort`; lists
version 3 is in Kubernetes' CEL since 1.34, and in what an apiserver accepts in a new policy
since 1.35, as it compiles new expressions with the previous minor's environment) and
Kubernetes' quantity library (`isQuantity`, `quantity`, `isInteger`, `compareTo`,
`asInteger`, `asApproximateFloat` as members; `sign(q)` as a function, not a member).
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook import celtext
from webhook.celtext import glob_re2, q, qlist
from webhook.selectors import LabelSelector

__all__ = ["glob_re2", "name_test", "q", "qlist", "quantity_of", "selector_test", "shown"]


def name_test(var: str, patterns: Iterable[str]) -> str:
    """`celtext.name_test`, in parentheses so it can stand in a longer condition."""
    test = celtext.name_test(var, patterns)
    return test if test == "false" else f"({test})"


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
