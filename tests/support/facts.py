"""Facts with every field set apart from its default, for the tests of the methods that copy
Facts field by field (`with_dra`, `taken`, the holds' `with_usage`): a field such a method
drops would read as its default, and so differ from the value here.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from webhook.facts.dra import DraFacts
from webhook.facts.model import Facts, NodeIndex, PriorityClass, Quota, ServingRuntimes, Usage
from webhook.facts.provisioning import by_namespace
from webhook.facts.queues import QueueFacts
from webhook.facts.usages import NamespaceUsages

GPU = "nvidia.com/gpu"


def full_facts() -> Facts:
    """Facts of namespace `ml` (3 of 8 GPUs of its quota in use) whose every field with a
    default holds another value; a field added to Facts without one here fails at once."""
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
