"""The methods that build a compiled value from another, field by field, keep every field.

`Facts.with_dra`, `Facts.taken` and `Context.judging` build their values positionally (cheaper
than keywords for a compiled constructor, and than `dataclasses.replace`); a field added to
the class and left out of one of them would read as its default. Each is checked against a
value whose every field differs from its default.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from webhook.engine.context import Context
from webhook.engine.queueing import QueueMeta
from webhook.engine.totals import Totals
from webhook.facts.dra import DraFacts
from webhook.facts.model import Facts, NodeIndex, PriorityClass, Quota, ServingRuntimes, Usage
from webhook.facts.provisioning import by_namespace
from webhook.facts.queues import QueueFacts
from webhook.facts.usages import NamespaceUsages

GPU = "nvidia.com/gpu"


def _full() -> Facts:
    full = Facts(
        namespace="ml",
        namespace_labels={"team": "vision"},
        quotas=(Quota("ml", "gpus", {GPU: Fraction(8)}, {GPU: Fraction(3)}),),
        usage=Usage(by_resource={GPU: Fraction(3)}, by_product={}),
        priority_classes={"high": PriorityClass("high", 1000)},
        nodes=NodeIndex(),
        age_seconds=4.0,
        config_maps={"env": {}},
        secrets={"keys": {}},
        provisionable=by_namespace([]),
        serving_runtimes=ServingRuntimes({}, {}),
        dra=DraFacts(None, None, None, {}),
        unheld=Usage(by_resource={"other.com/gpu": Fraction(1)}, by_product={}),
        usages=NamespaceUsages(lambda: {}, lambda: {}),
        queues=QueueFacts({}, {}, {}, {}),
    )
    for f in dataclasses.fields(Facts):
        if f.default is not dataclasses.MISSING:
            assert getattr(full, f.name) != f.default, f"give {f.name} a value of its own"
    return full


def test_with_dra_changes_only_the_dra_objects() -> None:
    full = _full()
    other = DraFacts(None, None, None, {"gpu.example.com": 1})
    got = full.with_dra(other)
    assert got.dra is other
    assert got == dataclasses.replace(full, dra=other)
    assert full.dra != other  # the value it was made from is left as it was


def test_taken_is_the_constructor_by_name() -> None:
    full = _full()
    fields = {f.name: getattr(full, f.name) for f in dataclasses.fields(Facts)}
    assert Facts.taken(**fields) == full


def test_judging_keeps_the_context_and_adds_what_validations_read() -> None:
    full = _full()
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
