"""The routing as the apiserver runs it: the webhooks' matchConditions evaluated with a real
CEL interpreter (`selects`), and the engine as the judge of which objects the webhook must see
(`needs_webhook`). The objects to route are in routingexamples.py.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import cel

from tests.support.manifests import (
    ROOT,
    RULES,
    resource_of,
    webhook_entries,
)
from webhook.engine import compile_rules, evaluate, subject_for
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.podviews import group_of, pod_views
from webhook.facts.model import Facts
from webhook.facts.snapshotfile import load_snapshot
from webhook.facts.static import StaticSnapshot
from webhook.ruleset.models import RuleSet

UNTAINTED = (
    ROOT / "tests" / "golden" / "access-untainted-gpu-nodes-every-pod-gets-void" / "cluster.yaml"
)
# DeviceClasses of NVIDIA's DRA driver (GPUs, MIG, IMEX channels) and ml-team's claim templates
# and claims: which DRA claims hand out GPUs is known only from these.
DRA = ROOT / "tests" / "golden" / "dra-claim-template-pod-patched" / "cluster.yaml"

# --- (b) matchConditions, evaluated with CEL ----------------------------------------------------


@functools.cache
def _programs() -> tuple[tuple[str, Any], ...]:
    """The mutating webhook's conditions, compiled (the validating ones are the same)."""
    (hook,) = [h for kind, h in webhook_entries() if kind == "MutatingWebhookConfiguration"]
    return tuple((c["name"], cel.compile(c["expression"])) for c in hook["matchConditions"])


def _request(obj: dict[str, Any], operation: str) -> dict[str, Any]:
    """The `request` variable as the apiserver builds it for matchConditions."""
    group, _, version = str(obj.get("apiVersion", "v1")).rpartition("/")
    kind = {"group": group, "version": version, "kind": obj.get("kind", "")}
    resource = {"group": group, "version": version, "resource": resource_of(kind["kind"])}
    return {
        "kind": kind,
        "resource": resource,
        "subResource": "",
        "requestKind": kind,
        "requestResource": resource,
        "name": obj.get("metadata", {}).get("name", ""),
        "namespace": "ml-team",
        "operation": operation,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }


def selects(obj: dict[str, Any], *, operation: str = "CREATE", old: Any = None) -> bool:
    """Whether the apiserver would call the webhooks: every matchCondition is true."""
    context = cel.Context()
    context.add_variable("object", obj)
    context.add_variable("oldObject", old)
    context.add_variable("request", _request(obj, operation))
    results = {name: program.execute(context) for name, program in _programs()}
    assert all(isinstance(r, bool) for r in results.values()), results
    return all(results.values())


def needs_webhook(obj: dict[str, Any], rules: RuleSet = RULES) -> bool:
    """The judge: the engine itself. The webhook must see an object with a GPU pod spec (the
    cluster-aware rules judge those with facts), and any object the engine would change or
    judge under the rule set (the GPU-access rules reach pods that ask for no GPU)."""
    group, kind = group_of(obj.get("apiVersion")), obj["kind"]
    compiled = _compiled(rules)
    if any(
        view.asks_gpu
        for view in pod_views(obj, group=group, kind=kind, is_gpu=compiled.base.is_gpu)
    ):
        return True
    return _engine_acts(obj, compiled, None)


def needs_webhook_dra(obj: dict[str, Any]) -> bool:
    """`needs_webhook` with the DRA driver's classes and ml-team's claim templates known."""
    return _engine_acts(obj, _compiled(RULES), _snapshot(DRA).facts_for("ml-team"))


def needs_webhook_untainted(obj: dict[str, Any]) -> bool:
    """`needs_webhook` with facts that show a GPU node without any taint."""
    return _engine_acts(obj, _compiled(RULES), _snapshot(UNTAINTED).facts_for("ml-team"))


def _engine_acts(obj: dict[str, Any], rules: CompiledRuleSet, facts: Facts | None) -> bool:
    """Whether the engine, given these facts, would change or judge `obj` in ml-team."""
    decision = evaluate(subject_for(obj, namespace="ml-team"), rules, facts)
    return bool(decision.patch or decision.judged or decision.unreadable)


@functools.cache
def _snapshot(path: Path) -> StaticSnapshot:
    return load_snapshot(path)


_COMPILED: dict[int, CompiledRuleSet] = {}


def _compiled(rules: RuleSet) -> CompiledRuleSet:
    if id(rules) not in _COMPILED:
        _COMPILED[id(rules)] = compile_rules(rules)
    return _COMPILED[id(rules)]
