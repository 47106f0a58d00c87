"""The engine's own finding messages, turned into CEL string expressions.

Rather than spelling our wording a second time, each exported rule runs the engine's check
once on a made-up container whose label, path, names and values are placeholders, and the
message it writes becomes a CEL concatenation with the placeholders replaced by CEL
expressions. So a change of wording in `engine/checks` reaches the native policies on the
next export, and the agreement test shows any drift.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from webhook.engine.compiled import CompiledRules
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import ContainerView, PodView
from webhook.export.cel import q
from webhook.quantity import Amount

__all__ = ["LIMITED", "REQUESTED", "engine_message", "slot"]

_MARK = "\x00"
_SLOT = re.compile(r"\x00(\w+)\x00")
# Counts whose shown form ("987654321") stands for a value the CEL shows.
REQUESTED = 987654321
LIMITED = 123456781


def slot(name: str) -> str:
    """A placeholder the message template replaces with a CEL expression."""
    return f"{_MARK}{name}{_MARK}"


# The made-up container's name. The engine spells a container's label from its kind and name
# ('init container "..."'); that whole label becomes the `label` placeholder. (ContainerView is
# not subclassed for this: the engine's classes are compiled by mypyc, which forbids it.)
_NAME = f"{_MARK}name{_MARK}"


def _view(
    limits: Mapping[str, Amount],
    requests: Mapping[str, Amount],
    raw: Mapping[str, Any] | None = None,
    *,
    init: bool = False,
) -> PodView:
    """A pod of one made-up container: its label, path and resources key are placeholders,
    and it sets nothing but the GPU amounts given."""
    c = ContainerView(
        raw={},
        slot=("containers", 0),
        init=init,
        name=_NAME,
        field_path=slot("path"),
        gpu_limits=dict(limits),
        gpu_requests=dict(requests),
        raw_gpu_limits=dict(raw or {n: str(v) for n, v in limits.items()}),
        raw_gpu_requests=dict(raw or {n: str(v) for n, v in requests.items()}),
        asks_gpu=any(v > 0 for v in (*limits.values(), *requests.values())),
        resources_key=slot("key"),
    )
    return PodView(
        spec={"containers": [c.raw]},
        pointer="/spec",
        field_path="spec",
        kind="Pod",
        labels={},
        owner_kinds=(),
        containers=(c,),
        serving="main",  # its one container takes traffic (gpu-readiness-probe)
    )


def engine_message(
    check: Callable[[PodView, Context], Iterable[Finding]],
    rules: CompiledRules,
    values: Mapping[str, str],
    *,
    limits: Mapping[str, Amount] | None = None,
    requests: Mapping[str, Amount] | None = None,
    raw: Mapping[str, Any] | None = None,
    init: bool = False,
    literals: Mapping[str, str] | None = None,
) -> str:
    """The CEL string expression for the one finding `check` makes on the made-up container.

    `values` maps each placeholder name (`label`, `path`, `key`, and the check's own) to its
    CEL expression; `literals` maps text the made-up values put in the message (a sentinel
    count such as "987654321", a made-up resource name) to the CEL expression for the real one.
    """
    view = _view(limits or {}, requests or {}, raw, init=init)
    ctx = Context(rules, "default", "Pod")
    found = list(check(view, ctx))
    if len(found) != 1:
        raise RuntimeError(f"{check.__name__} made {len(found)} findings of its template")
    text = found[0].message().replace(view.containers[0].label(), slot("label"))
    for n, (literal, expr) in enumerate((literals or {}).items()):
        text = text.replace(literal, slot(f"literal{n}"))
        values = {**values, f"literal{n}": expr}
    pieces = []
    for i, part in enumerate(_SLOT.split(text)):
        if i % 2:
            pieces.append(f"({values[part]})")
        elif part:
            pieces.append(q(part))
    return " + ".join(pieces)
