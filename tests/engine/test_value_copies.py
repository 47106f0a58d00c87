"""The methods that build a compiled value from another, field by field, keep every field.

`Facts.with_dra`, `Facts.taken` and `Context.judging` build their values positionally (cheaper
than keywords for a compiled constructor, and than `dataclasses.replace`); a field added to
the class and left out of one of them would read as its default. Each is checked against a
value whose every field differs from its default.
"""

from __future__ import annotations

import dataclasses

from tests.support.facts import GPU, full_facts
from webhook.engine.context import Context
from webhook.engine.queueing import QueueMeta
from webhook.engine.totals import Totals
from webhook.facts.dra import DraFacts
from webhook.facts.model import Facts


def test_with_dra_changes_only_the_dra_objects() -> None:
    full = full_facts()
    other = DraFacts(None, None, None, {"gpu.example.com": 1})
    got = full.with_dra(other)
    assert got.dra is other
    assert got == dataclasses.replace(full, dra=other)
    assert full.dra != other  # the value it was made from is left as it was


def test_taken_is_the_constructor_by_name() -> None:
    full = full_facts()
    fields = {f.name: getattr(full, f.name) for f in dataclasses.fields(Facts)}
    assert Facts.taken(**fields) == full


def test_judging_keeps_the_context_and_adds_what_validations_read() -> None:
    full = full_facts()
    rules = object()
    ctx = Context(
        rules,  # type: ignore[arg-type]
        "ml",
        "Job",
        "UPDATE",
        full,
        DraFacts(None, None, None, {}),
        ("DaemonSet", "agent"),
        True,
        QueueMeta("/metadata", None),
    )
    meta = QueueMeta("/spec/jobTemplate/metadata", {"labels": {}})
    totals = Totals("/spec/template/spec", {GPU: 4}, (), True, None)
    specs = ({"containers": []},)
    deadline = ("spec.activeDeadlineSeconds", 60)
    judged = ctx.judging(meta, totals, specs, deadline)
    assert judged is not ctx
    kept = ("rules", "namespace", "kind", "operation", "facts", "dra", "workload", "suspended")
    for name in kept:
        assert getattr(judged, name) is getattr(ctx, name), name
    assert (judged.queue_meta, judged.totals, judged.gpu_specs, judged.deadline) == (
        meta,
        totals,
        specs,
        deadline,
    )
    slots = getattr(Context, "__slots__", None)  # the sources' class (mypyc keeps no __slots__)
    if slots is not None:
        assert set(slots) == {*kept, "queue_meta", "totals", "gpu_specs", "deadline"}
    assert (ctx.totals, ctx.gpu_specs, ctx.deadline) == (None, (), None)  # left as it was
