"""Writes to a GPU-sharing scheduler's ConfigMaps: only the scheduler's binder may put a device
list there.

A shared container's NVIDIA_VISIBLE_DEVICES comes from a ConfigMap the scheduler's binder fills
at bind time (`engine.sharing`); the kubelet reads it again at every container start. A tenant
who may edit ConfigMaps in the namespace could otherwise write `all` there after binding, and
the next restart would see every GPU of the node. So a CREATE or UPDATE that adds or changes a
device key (SHARING_KEYS) of a ConfigMap owned by a pod, or named as the scheduler names them
(`<prefix>-shared-gpu-<n>`, `-i<n>` for init containers, `-evar` for its envFrom one), is
refused unless the requester is one of `gpuSharing.configMapWriters`. An UPDATE that leaves the
device keys as they were (labels, the garbage collector's owner edits) is not judged.

Only the webhook knows who writes: audits, which have no requester, judge no ConfigMap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from webhook.engine.decision import Decision, Mode, combine
from webhook.engine.findings import Finding
from webhook.engine.subject import Subject
from webhook.facts.devicekeys import SHARING_KEYS

__all__ = ["NAME_FORM", "RULE", "judge_config_map", "sharing_config_map"]

RULE = "visible-devices"
# KAI's names (gpusharingconfigmap.generateConfigMapNamePrefix and the names built on it):
# `<owner name>-<7 random characters>-shared-gpu` then `-<n>`, `-i<n>`, and `-evar`.
NAME_FORM = r"-shared-gpu-i?[0-9]+(-evar)?$"
_NAME = re.compile(NAME_FORM)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _device_keys(obj: Any) -> dict[str, Any]:
    data = _map(_map(obj).get("data"))
    return {k: data[k] for k in SHARING_KEYS if k in data}


def sharing_config_map(obj: Any) -> str:
    """Why this ConfigMap may be a sharing scheduler's ("" when it is not): a pod owns it, or
    its name has the scheduler's form."""
    meta = _map(_map(obj).get("metadata"))
    owners = meta.get("ownerReferences")
    for o in owners if isinstance(owners, list) else []:
        if _map(o).get("kind") == "Pod" and _map(o).get("apiVersion") == "v1":
            return f"owned by pod {_map(o).get('name')!r}"
    name = meta.get("name")
    if isinstance(name, str) and _NAME.search(name):
        return "named as a GPU-sharing scheduler names a pod's ConfigMaps"
    return ""


def judge_config_map(subject: Subject, writers: frozenset[str], mode: Mode) -> Decision:
    """The decision on one ConfigMap CREATE or UPDATE (`mode`: visible-devices' in the
    namespace). Nothing to say when the requester is unknown (an audit) or a writer."""
    if not subject.user or subject.user in writers or mode is Mode.OFF:
        return Decision()
    if subject.operation not in ("CREATE", "UPDATE"):
        return Decision()
    keys = _device_keys(subject.obj)
    old = subject.old_obj if subject.operation == "UPDATE" else None
    before = _device_keys(old)
    changed = sorted(k for k, v in keys.items() if before.get(k) != v)
    why = sharing_config_map(subject.obj) or sharing_config_map(old)
    if not changed or not why:
        return Decision()
    name = _map(_map(subject.obj).get("metadata")).get("name") or subject.name
    shown = ", ".join(f"{k}={str(keys[k])[:64]!r}" for k in changed)
    allowed = ", ".join(sorted(writers)) or "none configured"
    finding = Finding(
        rule=RULE,
        summary=(
            f"{RULE}: ConfigMap {name!r} ({why}) gets {shown} written by {subject.user!r}; "
            f"expected only the GPU-sharing scheduler's binder ({allowed}) to write it"
        ),
        fix=(
            f"leave data.{changed[0]} to the sharing scheduler, which writes the devices it "
            "granted the pod at bind time (any other value, e.g. 'all', hands its container "
            "every GPU of the node at the next restart). If your scheduler's binder runs as "
            "another user, add it to gpuSharing.configMapWriters in the rule set"
        ),
        field=f"data.{changed[0]}",
    )
    return combine([(finding, mode)])
