"""GPU node taints: GPU pods tolerate them, non-GPU pods should not squat on GPU nodes."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from typing import Any

from webhook.engine import claims
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import PodView
from webhook.namepatterns import NamePatterns
from webhook.ruleset.models import RuleSettings, TolerationSpec

__all__ = [
    "Prepared",
    "add_gpu_tolerations",
    "needed_tolerations",
    "prepare",
    "tolerates",
    "toleration_without_gpu",
]

# Each toleration with its resource-name pattern; the DeviceClass names and drivers each is
# for (same order); every GPU taint key.
Prepared = tuple[
    tuple[tuple[TolerationSpec, re.Pattern[str]], ...],
    tuple[tuple[NamePatterns, NamePatterns], ...],
    frozenset[str],
]


def prepare(settings: RuleSettings) -> Prepared:
    """gpu-tolerations made ready once per rule set: patterns compiled, keys gathered."""
    specs = settings.gpu_tolerations.tolerations
    return (
        tuple(
            # "(?!)" matches nothing: a toleration asked for by DRA devices alone.
            (spec, re.compile("|".join(fnmatch.translate(p) for p in spec.resources) or "(?!)"))
            for spec in specs
        ),
        tuple((NamePatterns(spec.device_classes), NamePatterns(spec.drivers)) for spec in specs),
        frozenset(spec.key for spec in specs),
    )


def tolerates(toleration: dict[str, Any], *, key: str, effect: str) -> bool:
    """Whether `toleration` already tolerates every taint with this key and effect.

    Only `Exists` counts: an `Equal` toleration matches one taint value, and values differ
    between clusters, so the webhook adds the `Exists` one beside it.
    """
    if toleration.get("operator") != "Exists":
        return False
    if toleration.get("key") not in (None, "", key):
        return False
    if toleration.get("effect") not in (None, "", effect):
        return False
    # With tolerationSeconds a NoExecute taint still evicts the pod later: not a standing one.
    return effect != "NoExecute" or toleration.get("tolerationSeconds") is None


def needed_tolerations(pod: PodView, ctx: Context) -> list[TolerationSpec]:
    """The configured tolerations whose resources this pod asks for, or whose DRA device
    classes or drivers its GPU claims draw from, in config order."""
    asked = {
        name
        for c in pod.containers
        if c.asks_gpu
        for name, value in {**c.gpu_requests, **c.gpu_limits}.items()
        if value > 0
    }
    asked.update(c.shared_gpu for c in pod.containers if c.shared_gpu)
    classes = {name for c in pod.containers for name in c.gpu_classes}
    return [
        spec
        for i, (spec, pattern) in enumerate(ctx.rules.tolerations)
        if any(map(pattern.match, asked)) or (classes and claims.tolerated_classes(i, classes, ctx))
    ]


def add_gpu_tolerations(spec: dict[str, Any], pod: PodView, ctx: Context) -> bool:
    changed = False
    for wanted in needed_tolerations(pod, ctx):
        current = spec.get("tolerations") or []
        if any(tolerates(t, key=wanted.key, effect=wanted.effect) for t in current):
            continue
        spec["tolerations"] = [
            *current,
            {"key": wanted.key, "operator": "Exists", "effect": wanted.effect},
        ]
        changed = True
    return changed


def toleration_without_gpu(pod: PodView, ctx: Context) -> Iterator[Finding]:
    """A pod that asks for no GPU but tolerates the GPU taint takes CPU and memory on GPU nodes.

    DaemonSet pods (node agents, exporters) are meant to run everywhere, and a keyless `Exists`
    toleration is the deliberate "run on every node" idiom: neither is reported. Nor is a pod
    with DRA claims that may hand out GPUs (a template or class the facts do not show), nor a
    runtime whose GPUs come from the objects merged into it (a ServingRuntime's predictors).
    """
    if pod.asks_gpu or pod.runtime or "DaemonSet" in pod.owner_kinds:
        return
    if pod.resource_claims and claims.may_ask_gpu(pod, ctx):
        return
    if any(c.unresolved for c in pod.containers):
        return  # devices of a DRA class not known yet may well be GPUs
    keys = ctx.rules.taint_keys
    for i, toleration in enumerate(pod.spec.get("tolerations") or []):
        key = toleration.get("key")
        if key in keys:
            yield Finding(
                rule="gpu-toleration-without-gpu",
                summary=(
                    f"gpu-toleration-without-gpu: {pod.field_path}.tolerations[{i}] tolerates "
                    f"{key} but no container asks for a GPU"
                ),
                fix=(
                    f"remove the {key} toleration, or ask for a GPU in resources.limits (or "
                    "through a DRA claim of a GPU DeviceClass); "
                    "otherwise this pod takes room on GPU nodes that GPU pods need"
                ),
                field=f"{pod.field_path}.tolerations[{i}]",
            )
