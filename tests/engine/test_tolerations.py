"""Tolerations read as the scheduler reads them, field by field.

`reach.tolerates_taint` (may a pod land on a node with this taint) and `placement.tolerates`
(does a pod already carry a standing toleration of every taint with this key and effect, so
`gpu-tolerations` adds none) are checked over a grid of tolerations and taints against
`upstream`: Kubernetes' `Toleration.ToleratesTaint` (k8s.io/api core/v1 toleration.go),
restated here from its documented rules, plus the eviction rule of `tolerationSeconds`.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from webhook.engine.checks.placement import tolerates
from webhook.engine.reach import tolerates_taint

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NV, AMD = "nvidia.com/gpu", "amd.com/gpu"
KEYS = (NV, AMD)
VALUES = ("", "present", "true")


def upstream(toleration: dict[str, Any], taint: tuple[str, str, str]) -> bool:
    """ToleratesTaint: (1) an empty effect matches every effect, else the effects are equal;
    (3) an empty key matches every key, else the keys are equal; (2) `Exists` matches every
    value, `Equal` (also the empty operator) the same value; any other operator nothing."""
    key, value, effect = taint
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    if toleration.get("key") and toleration["key"] != key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == value
    return False


def standing(toleration: dict[str, Any], key: str, effect: str) -> bool:
    """Tolerates every taint with this key and effect, whatever its value, for good: a
    `NoExecute` toleration with `tolerationSeconds` (0 or more) is evicted when it runs out;
    on other effects the field is ignored."""
    if effect == "NoExecute" and toleration.get("tolerationSeconds") is not None:
        return False
    return all(upstream(toleration, (key, value, effect)) for value in VALUES)


def _tolerations() -> list[dict[str, Any]]:
    """Every combination of the fields, absent or present, with the values that differ."""
    out = []
    for key, operator, value, effect, seconds in itertools.product(
        (None, "", *KEYS),
        (None, "", "Exists", "Equal", "Lt"),
        (None, "", "present"),
        (None, "", *EFFECTS),
        (None, 0, 300),
    ):
        fields = {
            "key": key,
            "operator": operator,
            "value": value,
            "effect": effect,
            "tolerationSeconds": seconds,
        }
        out.append({k: v for k, v in fields.items() if v is not None})
    return out


TOLERATIONS = _tolerations()
TAINTS = [(k, v, e) for k in KEYS for v in VALUES for e in EFFECTS]


def _empty_key_equal(toleration: dict[str, Any]) -> bool:
    """An empty key with an operator other than Exists: the apiserver refuses such a pod
    ("operator must be Exists when `key` is empty"), so it never reaches a node."""
    return not toleration.get("key") and (toleration.get("operator") or "Equal") != "Exists"


def test_the_grid_covers_each_field_s_cases() -> None:
    assert len(TOLERATIONS) == 4 * 5 * 3 * 5 * 3
    assert len(TAINTS) == 18


@pytest.mark.parametrize("taint", TAINTS, ids=["/".join(t) for t in TAINTS])
def test_tolerates_taint_is_the_scheduler_s_rule(taint: tuple[str, str, str]) -> None:
    wrong = [
        t
        for t in TOLERATIONS
        if not _empty_key_equal(t) and tolerates_taint(t, taint) != upstream(t, taint)
    ]
    assert wrong == []


@pytest.mark.parametrize("taint", TAINTS, ids=["/".join(t) for t in TAINTS])
def test_an_empty_key_tolerates_nothing_unless_it_exists(taint: tuple[str, str, str]) -> None:
    """The one departure from the Go function: for a toleration the apiserver would refuse,
    no node is taken as reachable through it."""
    for t in TOLERATIONS:
        if _empty_key_equal(t):
            assert tolerates_taint(t, taint) is False, t


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": NV, "operator": "Exists"}, (NV, "x", "NoSchedule"), True),
        ({"key": NV, "operator": "Exists", "effect": "NoExecute"}, (NV, "", "NoSchedule"), False),
        ({"key": NV, "value": "present"}, (NV, "present", "NoSchedule"), True),
        ({"key": NV, "value": "present"}, (NV, "other", "NoSchedule"), False),
        ({"key": NV}, (NV, "", "PreferNoSchedule"), True),
        ({"operator": "Exists"}, (AMD, "x", "NoExecute"), True),
        ({"key": "", "operator": "Exists", "effect": "NoSchedule"}, (AMD, "", "NoExecute"), False),
        ({"key": AMD, "operator": "Exists"}, (NV, "", "NoSchedule"), False),
        ({"key": NV, "operator": "Gt", "value": "1"}, (NV, "2", "NoSchedule"), False),
    ],
)
def test_named_cases(
    toleration: dict[str, Any], taint: tuple[str, str, str], expected: bool
) -> None:
    assert tolerates_taint(toleration, taint) is expected is upstream(toleration, taint)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("effect", EFFECTS)
def test_a_standing_toleration_is_one_of_every_value_for_good(key: str, effect: str) -> None:
    wrong = [
        t for t in TOLERATIONS if tolerates(t, key=key, effect=effect) != standing(t, key, effect)
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("toleration", "effect", "expected"),
    [
        ({"key": NV, "operator": "Exists"}, "NoSchedule", True),
        ({"operator": "Exists"}, "NoExecute", True),  # every taint, for good
        ({"key": "", "operator": "Exists"}, "PreferNoSchedule", True),
        ({"key": NV, "operator": "Exists", "effect": ""}, "NoExecute", True),
        # Evicted after five minutes: the webhook adds a standing one beside it.
        ({"key": NV, "operator": "Exists", "tolerationSeconds": 300}, "NoExecute", False),
        ({"key": NV, "operator": "Exists", "tolerationSeconds": 0}, "NoExecute", False),
        # tolerationSeconds means nothing for the other effects.
        ({"key": NV, "operator": "Exists", "tolerationSeconds": 0}, "NoSchedule", True),
        ({"key": NV, "operator": "Exists", "tolerationSeconds": 0}, "PreferNoSchedule", True),
        ({"key": NV, "operator": "Exists", "effect": "NoSchedule"}, "NoExecute", False),
        ({"key": NV, "operator": "Exists", "effect": "PreferNoSchedule"}, "NoSchedule", False),
        # One value only: clusters taint with different values.
        ({"key": NV, "operator": "Equal", "value": "present"}, "NoSchedule", False),
        ({"key": NV}, "NoSchedule", False),
        ({"key": AMD, "operator": "Exists"}, "NoSchedule", False),
    ],
)
def test_named_standing_cases(toleration: dict[str, Any], effect: str, expected: bool) -> None:
    found = tolerates(toleration, key=NV, effect=effect)
    assert found is expected is standing(toleration, NV, effect)
