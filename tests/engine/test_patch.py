"""The narrow diff produces patches that jsonpatch applies back to exactly the mutated copy."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest

from webhook.engine.patch import clone, diff

BASE: dict[str, Any] = {
    "containers": [
        {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1"}}, "env": [{"name": "X"}]}
    ],
    "volumes": [{"name": "data", "emptyDir": {}}],
    "weird~key/with": {"x": 1},
}


def _set_key(d: dict[str, Any]) -> None:
    d["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def _append(d: dict[str, Any]) -> None:
    d["volumes"].append({"name": "dshm", "emptyDir": {"medium": "Memory"}})


def _nested(d: dict[str, Any]) -> None:
    d["containers"][0]["resources"]["limits"]["memory"] = "1Gi"


def _scalar(d: dict[str, Any]) -> None:
    d["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"


def _escaped(d: dict[str, Any]) -> None:
    d["weird~key/with"]["y"] = 2


def _remove(d: dict[str, Any]) -> None:
    del d["volumes"]


def _shrink(d: dict[str, Any]) -> None:
    d["containers"][0]["env"] = []


def _retype(d: dict[str, Any]) -> None:
    d["volumes"] = {"not": "a list"}


EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "add a key": _set_key,
    "append to a list": _append,
    "add a nested key": _nested,
    "change a scalar": _scalar,
    "keys with ~ and /": _escaped,
    "remove a key": _remove,
    "shrink a list": _shrink,
    "change a type": _retype,
}


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_the_diff_applies_back_to_the_edited_copy(edit: Callable[[dict[str, Any]], None]) -> None:
    work = clone(BASE)
    edit(work)
    ops = diff(BASE, work, "/spec")
    assert ops
    assert jsonpatch.apply_patch({"spec": copy.deepcopy(BASE)}, ops) == {"spec": work}


def test_equal_documents_give_no_operations() -> None:
    assert diff(BASE, clone(BASE)) == []


def test_keys_are_escaped_in_paths() -> None:
    work = clone(BASE)
    _escaped(work)
    assert diff(BASE, work) == [{"op": "add", "path": "/weird~0key~1with/y", "value": 2}]


def test_a_missing_array_is_added_whole_not_appended_to() -> None:
    work = clone(BASE)
    _set_key(work)
    assert diff(BASE, work) == [{"op": "add", "path": "/tolerations", "value": work["tolerations"]}]


def test_clone_shares_nothing_mutable() -> None:
    copied = clone(BASE)
    copied["containers"][0]["env"].append({"name": "Y"})
    assert BASE["containers"][0]["env"] == [{"name": "X"}]
