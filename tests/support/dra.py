"""DRA objects and pods that claim them, the rules they go through, and the engine's decision: the
builders the DRA tests share (store, readers, rules, live cache).
"""

from __future__ import annotations

from typing import Any

from tests.support.paths import ROOT
from webhook.engine.compiled import compile_rules
from webhook.engine.decision import Decision
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.subject import subject_for
from webhook.facts.snapshotfile import SnapshotFile, snapshot_from_doc
from webhook.ruleset.files import load_rules

GPU_KEY = "gpu.nvidia.com.deviceclass.resource.k8s.io/devices"


def device_class(name: str, *expressions: str, extended: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if extended:
        spec["extendedResourceName"] = extended
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def exactly(name: str, cls: str, count: int | None = 1) -> dict[str, Any]:
    ask: dict[str, Any] = {"deviceClassName": cls}
    if count is None:
        ask["allocationMode"] = "All"
    else:
        ask["count"] = count
    return {"name": name, "exactly": ask}


def template(name: str, *requests: dict[str, Any], ns: str = "ml-team") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def claim(name: str, *requests: dict[str, Any], owner: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml-team"}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner, "uid": "u", "controller": True}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": list(requests)}},
    }


NVIDIA = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"

CLASSES = [
    device_class("gpu.nvidia.com", NVIDIA),
    device_class("h100-training", 'device.driver == "gpu.nvidia.com"'),  # a custom GPU class
    device_class("imex.nvidia.com", "device.driver == 'compute-domain.nvidia.com'"),
    device_class("nic.example.com", "device.driver == 'dra.net'"),
]


def snapshot(
    classes: list[dict[str, Any]] | None = CLASSES,
    templates: list[dict[str, Any]] | None = None,
    claims_: list[dict[str, Any]] | None = None,
    quotas: list[dict[str, Any]] | None = None,
) -> Any:
    doc: dict[str, Any] = {
        "apiVersion": "gpu-admission.io/v1",
        "kind": "ClusterSnapshot",
        "namespaces": {"ml-team": {"labels": {}}},
        "nodes": [
            {
                "name": "h100",
                "labels": {"nvidia.com/gpu.product": "H100"},
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                "allocatable": {"nvidia.com/gpu": 8},
            }
        ],
        "resourceQuotas": quotas or [],
        "deviceClasses": classes,
        "resourceClaimTemplates": templates,
        "resourceClaims": claims_,
    }
    return snapshot_from_doc(SnapshotFile.model_validate(doc))


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": list(containers), **spec},
    }


def ctr(name: str = "main", *refs: dict[str, str], memory: str = "8Gi") -> dict[str, Any]:
    res: dict[str, Any] = {"limits": {"memory": memory}}
    if refs:
        res["claims"] = list(refs)
    return {"name": name, "image": "cuda:12", "resources": res}


def by_template(name: str, tpl: str) -> dict[str, str]:
    return {"name": name, "resourceClaimTemplateName": tpl}


RULES = compile_rules(load_rules(ROOT / "rules"))


def decide(obj: dict[str, Any], source: Any, rules: Any = RULES) -> Decision:
    facts = source.facts_for("ml-team") if source is not None else None
    return evaluate(subject_for(obj, namespace="ml-team"), rules, facts, stage=Stage.ADMIT)


def patched_tolerations(decision: Decision) -> list[str]:
    return [
        t["key"]
        for op in decision.patch
        if op["path"].endswith("/tolerations")
        for t in op["value"]
    ]
