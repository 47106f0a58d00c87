"""Turn "mutate a copy" into a JSON patch: a working copy to edit, a diff for the patch.

`jsonpatch.make_patch` takes ~300 µs for a pod spec, more than the whole request budget. Two
things make it cheap here: `working_copy` copies only the containers the mutations edit in
place and shares every other subtree with the original, and `diff` skips any subtree that is
still the same object. The diff covers set keys, changed scalars and appended list items, and
replaces a list it can't align; `jsonpatch` applies and checks every patch in the tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["clone", "diff", "working_copy"]


def clone(value: Any) -> Any:
    """A deep copy of JSON-shaped data; scalars (str, int, datetime from YAML) are shared."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def _copy_container(container: Any) -> Any:
    return dict(container) if isinstance(container, dict) else container


def working_copy(
    spec: dict[str, Any], slots: Iterable[tuple[str | int, ...]] = ()
) -> dict[str, Any]:
    """A copy of a pod spec for the mutations to edit.

    The contract for mutations: they may set keys of the spec and of a container in place;
    anything deeper (a probe, a list, `resources`) they replace with a new object rather than
    edit. Subtrees they leave alone stay shared with the original, so copying and
    diffing cost what the mutations touched, not the size of the pod. `slots` names containers
    kept outside the three lists (KServe's `model`), which are copied the same way.
    """
    work = dict(spec)
    for list_name in ("initContainers", "containers", "ephemeralContainers"):
        containers = spec.get(list_name)
        if isinstance(containers, list):
            work[list_name] = [_copy_container(c) for c in containers]
    for slot in slots:
        if len(slot) == 1 and isinstance(slot[0], str) and slot[0] in spec:
            work[slot[0]] = _copy_container(spec[slot[0]])
    return work


def _escape(key: str) -> str:
    if "~" not in key and "/" not in key:  # nearly every key: no new string
        return key
    return key.replace("~", "~0").replace("/", "~1")


def diff(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """RFC 6902 operations that turn `old` into `new`; [] when they are equal."""
    ops: list[dict[str, Any]] = []
    if old is not new:
        _diff(old, new, path, ops)
    return ops


_MISSING: Any = object()


def _diff(old: Any, new: Any, path: str, ops: list[dict[str, Any]]) -> None:
    if type(old) is dict and type(new) is dict:
        kept = 0  # keys of `old` still in `new`: when that is all of `new`, none was added
        for key, old_value in old.items():
            new_value = new.get(key, _MISSING)
            if new_value is old_value:  # shared subtrees are unchanged by contract
                kept += 1
            elif new_value is _MISSING:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
            else:
                kept += 1
                _diff(old_value, new_value, f"{path}/{_escape(key)}", ops)
        if kept < len(new):
            for key, new_value in new.items():
                if key not in old:
                    ops.append({"op": "add", "path": f"{path}/{_escape(key)}", "value": new_value})
        return
    if isinstance(old, dict) and isinstance(new, dict):  # dict subclasses: the same, slower
        for key, old_value in old.items():
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
            elif new[key] is not old_value:
                _diff(old_value, new[key], f"{path}/{_escape(key)}", ops)
        for key, new_value in new.items():
            if key not in old:
                ops.append({"op": "add", "path": f"{path}/{_escape(key)}", "value": new_value})
        return
    if isinstance(old, list) and isinstance(new, list) and len(new) >= len(old):
        for i, old_item in enumerate(old):
            if new[i] is not old_item:
                _diff(old_item, new[i], f"{path}/{i}", ops)
        for i in range(len(old), len(new)):
            ops.append({"op": "add", "path": f"{path}/{i}", "value": new[i]})
        return
    if old != new or type(old) is not type(new):
        ops.append({"op": "replace", "path": path, "value": new})
