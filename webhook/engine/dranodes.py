"""GPUs DRA serves on a node, for the whole-node exception (`schedulable.why_not_whole_node`).

No node's allocatable lists them: the ResourceSlices its DRA drivers publish do (the facts keep
devices per node and driver, `facts.draslices`). A driver's devices count as GPUs when the rule
set names the driver (`gpuDeviceClasses.drivers`), or a known DeviceClass that hands out GPUs
requires it: one the rule set counts as a GPU class, or one whose `extendedResourceName` is a
GPU resource. Whoever claims those devices shares the node with the pod, whatever class the
claim names, so they count on every node whether or not the pod could use them.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.engine.claims import gpu_class
from webhook.engine.context import RulesInForce
from webhook.facts.dra import DraFacts
from webhook.facts.draslices import ANY_NODE

__all__ = ["dra_gpus_on"]


def _gpu_driver(driver: str, dra: DraFacts, rules: RulesInForce) -> bool:
    if rules.gpu_drivers.matches(driver):
        return True
    for dc in (dra.device_classes or {}).values():
        if driver not in dc.drivers:
            continue
        if gpu_class(dc.name, rules, dra) or (
            dc.extended_resource_name and rules.is_gpu(dc.extended_resource_name)
        ):
            return True
    return False


def dra_gpus_on(
    node: str, dra: DraFacts, devices: Mapping[str, Mapping[str, int]], rules: RulesInForce
) -> tuple[int, tuple[str, ...]]:
    """(GPUs DRA drivers publish for `node`, those drivers): its own slices and those offered
    to several nodes."""
    total = 0
    drivers: list[str] = []
    for where in (node, ANY_NODE) if node != ANY_NODE else (ANY_NODE,):
        for driver, count in devices.get(where, {}).items():
            if count > 0 and _gpu_driver(driver, dra, rules):
                total += count
                if driver not in drivers:
                    drivers.append(driver)
    return total, tuple(drivers)
