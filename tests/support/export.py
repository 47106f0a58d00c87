"""The export and what judges it: the golden cases and their rules, the policies exported for a
rule folder, and what those policies do to an object when the apiserver runs them
(tests/support/native_cel.py).
"""

from __future__ import annotations

import copy
import functools
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import ROOT
from webhook.engine import compile_rules, subject_for
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.podviews import group_of
from webhook.export.bundle import build
from webhook.ruleset.files import load_rules

GOLDEN = ROOT / "tests" / "golden"

K8S_SCHEMAS = ("1.36", "1.37")


def without_nulls(value: Any) -> Any:
    """Typed decoding (built-in kinds) and pruning (CRDs) drop the nulls a YAML file leaves;
    both the webhook and a policy see the object without them."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


class Case:
    """One object with its request, and the rule file it is judged under (None: rules/)."""

    def __init__(
        self,
        name: str,
        obj: dict[str, Any],
        *,
        namespace: str = "ml-team",
        operation: str = "CREATE",
        old: Any = None,
        subresource: str = "",
        rules: Path | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.obj = without_nulls(obj)
        self.namespace = namespace
        self.operation = operation
        self.old = without_nulls(old) if isinstance(old, dict) and operation == "UPDATE" else None
        self.subresource = subresource
        self.rules = rules
        self.labels = labels  # the namespace's, where the case's cluster facts say them

    def subject(self, obj: dict[str, Any] | None = None) -> Any:
        """The engine's input for `obj` (default: the case's object) in this request."""
        return subject_for(
            copy.deepcopy(self.obj if obj is None else obj),
            namespace=self.namespace,
            operation=self.operation,
            old_obj=self.old,
            subresource=self.subresource,
            namespace_labels=self.labels,
        )

    @property
    def request(self) -> dict[str, Any]:
        """The same request for the CEL: operation, namespace (and its labels), oldObject."""
        return {
            "operation": self.operation,
            "namespace": self.namespace,
            "old": self.old,
            "namespace_labels": self.labels,
        }


def labels_of_namespace(folder: Path, namespace: str) -> dict[str, str] | None:
    cluster = folder / "cluster.yaml"
    if not cluster.exists():
        return None
    namespaces = yaml.safe_load(cluster.read_text()).get("namespaces") or {}
    labels = (namespaces.get(namespace) or {}).get("labels")
    return dict(labels) if isinstance(labels, dict) else None


def read_golden_cases() -> list[Case]:
    cases = []
    for folder in sorted(GOLDEN.iterdir()):
        if not (folder / "input.yaml").exists():
            continue
        obj = yaml.safe_load((folder / "input.yaml").read_text())
        req_file = folder / "request.yaml"
        req = yaml.safe_load(req_file.read_text()) if req_file.exists() else {}
        if not isinstance(obj, dict):
            continue
        rules = folder / "rules.yaml"
        cases.append(
            Case(
                f"golden/{folder.name}",
                obj,
                namespace=str(req.get("namespace", "ml-team")),
                operation=str(req.get("operation", "CREATE")),
                old=req.get("old"),
                subresource=str(req.get("subresource", "")),
                rules=rules if rules.exists() else None,
                labels=labels_of_namespace(folder, str(req.get("namespace", "ml-team"))),
            )
        )
    return cases


GOLDEN_CASES = read_golden_cases()


@functools.cache
def rules_compiled(rule_file: Path | None) -> CompiledRuleSet:
    if rule_file is None:
        return compile_rules(load_rules(ROOT / "rules"))
    with tempfile.TemporaryDirectory(prefix="export-rules-") as tmp:
        (Path(tmp) / "rules.yaml").write_text(rule_file.read_text())
        return compile_rules(load_rules(tmp))


@functools.cache
def exported_policies(rule_file: Path | None) -> tuple[tuple[dict[str, Any], dict[str, Any]], ...]:
    """(policy, binding) of every exported rule."""
    objects = build(rules_compiled(rule_file)).objects
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    return tuple(
        (o, by_name[("ValidatingAdmissionPolicyBinding", o["metadata"]["name"])])
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy"
    )


def sent_to(policy: dict[str, Any], binding: dict[str, Any], case: Case, table: Any) -> bool:
    """Whether the apiserver would run the policy: matchConstraints and the binding's
    namespaceSelector (cluster-scoped objects are never skipped by it)."""
    group = group_of(case.obj.get("apiVersion"))
    kind = case.obj.get("kind")
    workload = table.get(group, kind) if isinstance(kind, str) else None
    if workload is None or case.subresource:
        return False
    resource = "pods" if (group, workload.kind) == ("", "Pod") else workload.declared.resource
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    if not any(
        group in r["apiGroups"] and resource in r["resources"] and case.operation in r["operations"]
        for r in rules
    ):
        return False
    selector = binding["spec"]["matchResources"].get("namespaceSelector")
    if selector is None or workload.cluster_scoped:
        return True
    return all(
        case.namespace not in e["values"]
        for e in selector["matchExpressions"]
        if e["key"] == "kubernetes.io/metadata.name" and e["operator"] == "NotIn"
    )


@functools.cache
def exported_mutations(rule_file: Path | None) -> tuple[tuple[dict[str, Any], dict[str, Any]], ...]:
    objects = build(rules_compiled(rule_file)).objects
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    return tuple(
        (o, by_name[("MutatingAdmissionPolicyBinding", o["metadata"]["name"])])
        for o in objects
        if o["kind"] == "MutatingAdmissionPolicy"
    )


def rule_folder(tmp_path: Path, text: str) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    (folder / "rules.yaml").write_text(text)
    return folder


def half_gpu_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {
                    "name": "llm",
                    "image": "vllm",
                    "resources": {"limits": {"nvidia.com/gpu": "500m", "memory": "8Gi"}},
                }
            ]
        },
    }
