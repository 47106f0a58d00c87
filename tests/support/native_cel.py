"""Run exported admission policies as the apiserver would, with the `cel` library.

The library has CEL's core; cel-go's strings and lists extensions come from its opt-in
`cel.stdlib` (Python implementations), and Kubernetes' quantity library, which it lacks, is
implemented here for the tests only on top of `webhook.quantity` (the parser the engine
uses): `isQuantity`, `quantity`, `sign`, `isInteger`, `asInteger`, `asApproximateFloat`,
`compareTo`. A quantity is carried as a one-key map, which no object field can produce.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import cel
from cel import stdlib

from webhook.quantity import MAX_QUANTITY, QuantityError, parse_quantity

_TAG = "\x00quantity"


def _parse(text: Any) -> Fraction:
    if not isinstance(text, str):
        raise TypeError(f"quantity() takes a string, not {type(text).__name__}")
    return parse_quantity(text)  # type: ignore[return-value]


def _value(q: Any) -> Fraction:
    if not (isinstance(q, dict) and set(q) == {_TAG}):
        raise TypeError(f"not a quantity: {q!r}")
    return Fraction(q[_TAG])


def _is_quantity(text: Any) -> bool:
    try:
        _parse(text)
    except (QuantityError, TypeError):
        return False
    return True


def _quantity(text: Any) -> dict[str, str]:
    return {_TAG: str(_parse(text))}


def _is_integer(q: Any) -> bool:
    v = _value(q)
    return v.denominator == 1 and abs(v) <= MAX_QUANTITY


def _as_integer(q: Any) -> int:
    if not _is_integer(q):
        raise ValueError("quantity is not an integer")
    return int(_value(q))


def _compare(a: Any, b: Any) -> int:
    x, y = _value(a), _value(b)
    return (x > y) - (x < y)


QUANTITY_LIBRARY = {
    "isQuantity": _is_quantity,
    "quantity": _quantity,
    "sign": lambda q: (_value(q) > 0) - (_value(q) < 0),
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: float(_value(q)),
    "compareTo": _compare,
}


@functools.cache
def program(expression: str) -> Any:
    return cel.compile(expression)


def context(bindings: dict[str, Any]) -> Any:
    ctx = cel.Context()
    stdlib.add_stdlib_to_context(ctx)
    for name, fn in QUANTITY_LIBRARY.items():
        ctx.add_function(name, fn)  # type: ignore[arg-type]
    for name, value in bindings.items():
        ctx.add_variable(name, value)
    return ctx


def request_for(obj: dict[str, Any], operation: str, namespace: str) -> dict[str, Any]:
    """The `request` variable as the apiserver binds it (group and kind of the object)."""
    group, _, version = str(obj.get("apiVersion", "v1")).rpartition("/")
    kind = {"group": group, "version": version, "kind": str(obj.get("kind", ""))}
    return {
        "kind": kind,
        "requestKind": kind,
        "name": (obj.get("metadata") or {}).get("name", ""),
        "namespace": namespace,
        "operation": operation,
        "subResource": "",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "dryRun": False,
    }


def namespace_object(namespace: str, labels: dict[str, str] | None) -> dict[str, Any] | None:
    """`namespaceObject`: None where the labels are unknown (as for the engine without facts:
    no namespace selector matches then)."""
    if labels is None:
        return None
    meta = {"name": namespace, "labels": labels}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


@dataclass(frozen=True)
class Outcome:
    """One policy on one request: skipped by its match conditions, passed, or failed."""

    matched: bool
    failed: bool = False
    message: str = ""


def evaluate_policy(
    policy: dict[str, Any],
    obj: dict[str, Any],
    *,
    operation: str = "CREATE",
    namespace: str = "ml-team",
    old: dict[str, Any] | None = None,
    namespace_labels: dict[str, str] | None = None,
) -> Outcome:
    """matchConditions, then the variables in order, then each validation and its message.

    An evaluation error propagates (under failurePolicy Fail the apiserver refuses the
    object); the caller decides whether the webhook would have refused it too.
    """
    spec = policy["spec"]
    bindings: dict[str, Any] = {
        "object": obj,
        "oldObject": old,
        "request": request_for(obj, operation, namespace),
        "params": None,
        "namespaceObject": namespace_object(namespace, namespace_labels),
    }
    ctx = context(bindings)  # one context: only `variables` grows
    for condition in spec.get("matchConditions", []):
        if program(condition["expression"]).execute(ctx) is not True:
            return Outcome(matched=False)
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        ctx.add_variable("variables", variables)
        variables[variable["name"]] = program(variable["expression"]).execute(ctx)
    ctx.add_variable("variables", variables)
    for validation in spec["validations"]:
        verdict = program(validation["expression"]).execute(ctx)
        assert isinstance(verdict, bool), verdict
        if not verdict:
            message = program(validation["messageExpression"]).execute(ctx)
            return Outcome(matched=True, failed=True, message=str(message))
    return Outcome(matched=True)


# JSONPatch{op: ..., path: ..., value: ...} is a typed object literal of the apiserver's CEL,
# which the library cannot build (it has no struct types). The export always spells it the
# same way, so the tests read it as a map with the same three fields.
_PATCH_TOKENS = (
    ("JSONPatch{op: ", "{'op': "),
    (", path: ", ", 'path': "),
    (", value: ", ", 'value': "),
)


def as_maps(expression: str) -> str:
    """The JSONPatch literals of an exported expression, as maps the library can build."""
    counts = {expression.count(token) for token, _ in _PATCH_TOKENS}
    assert len(counts) == 1, f"a JSONPatch literal the tests cannot read: {expression}"
    for token, replacement in _PATCH_TOKENS:
        expression = expression.replace(token, replacement)
    return expression


def _escape_key(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def mutation_patches(
    policy: dict[str, Any],
    obj: dict[str, Any],
    *,
    operation: str = "CREATE",
    namespace: str = "ml-team",
    old: dict[str, Any] | None = None,
    namespace_labels: dict[str, str] | None = None,
) -> list[dict[str, Any]] | None:
    """The JSON patch a MutatingAdmissionPolicy makes (None: its match conditions skip it)."""
    spec = policy["spec"]
    bindings: dict[str, Any] = {
        "object": obj,
        "oldObject": old,
        "request": request_for(obj, operation, namespace),
        "params": None,
        "namespaceObject": namespace_object(namespace, namespace_labels),
    }

    ctx = context(bindings)  # one context: only `variables` grows
    ctx.add_function("jsonpatch.escapeKey", _escape_key)

    def run(expression: str) -> Any:
        return program(expression).execute(ctx)

    for condition in spec.get("matchConditions", []):
        if run(condition["expression"]) is not True:
            return None
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        ctx.add_variable("variables", variables)
        variables[variable["name"]] = run(variable["expression"])
    ctx.add_variable("variables", variables)
    patches: list[dict[str, Any]] = []
    for mutation in spec["mutations"]:
        assert mutation["patchType"] == "JSONPatch"
        patches += run(as_maps(mutation["jsonPatch"]["expression"]))
    return patches
