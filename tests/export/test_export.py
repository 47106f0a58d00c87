"""`gpu-admission export`: native admission policies that judge as the webhook does.

The exported CEL is run with the `cel` library (see tests/support/native_cel.py for what it
adds) over every golden case and every object of the corpus, and compared with the engine on the
same object, rule by rule: a policy fails exactly when the engine has a finding of its rule,
with the same messages. The objects validate against the Kubernetes schema, and the output is
the same bytes for the same rules.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.support.export import (
    GOLDEN_CASES,
    Case,
    exported_mutations,
    exported_policies,
    half_gpu_pod,
    rule_folder,
    rules_compiled,
    sent_to,
)
from tests.support.native_cel import evaluate_policy, mutation_patches
from tests.support.paths import CORPUS
from webhook.engine import compile_rules, evaluate
from webhook.engine.checks import MUTATIONS
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.decision import Decision
from webhook.engine.pipeline import Stage
from webhook.export.bundle import build
from webhook.export.scope import RULES_ANNOTATION
from webhook.export.validating import SEPARATOR
from webhook.ruleset.files import load_rules

# --- the objects: golden cases and the corpus, as the apiserver hands them over -------------------


def _review_case(name: str, doc: dict[str, Any]) -> Case | None:
    """An AdmissionReview, a bare AdmissionRequest, or a bare object."""
    request = doc.get("request") if isinstance(doc.get("request"), dict) else None
    if request is None and "operation" in doc and "object" in doc:
        request = doc
    if request is None:
        return Case(name, doc) if "kind" in doc and "apiVersion" in doc else None
    obj = request.get("object")
    if not isinstance(obj, dict) or request.get("operation") not in ("CREATE", "UPDATE"):
        return None
    return Case(
        name,
        obj,
        namespace=str(request.get("namespace") or "ml-team"),
        operation=str(request["operation"]),
        old=request.get("oldObject"),
        subresource=str(request.get("subResource") or ""),
    )


def _corpus() -> list[Case]:
    cases: list[Case] = []
    for path in sorted((CORPUS / "manifests").glob("*")):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue  # a few files are broken as published
        cases += [
            Case(f"corpus/{path.stem}#{i}", d) for i, d in enumerate(docs) if isinstance(d, dict)
        ]
    for path in sorted((CORPUS / "admissionreviews").glob("*")):
        try:
            doc = yaml.safe_load(path.read_text())  # JSON is YAML
        except yaml.YAMLError:
            continue
        if isinstance(doc, dict):
            case = _review_case(f"corpus/{path.stem}", doc)
            if case is not None:
                cases.append(case)
    return cases


CORPUS_CASES = _corpus() if CORPUS.is_dir() else []


# --- the rules and what the export makes of them ------------------------------------------------


def _decision(case: Case, rules: CompiledRuleSet) -> Decision:
    """The engine on the object as the validating webhook gets it (after any mutation)."""
    return evaluate(case.subject(), rules, None, stage=Stage.VALIDATE)


def _agree(case: Case) -> set[str]:
    """Compare every validating policy with the engine on the case; the rules that fired."""
    fired: set[str] = set()
    rules = rules_compiled(case.rules)
    decision = _decision(case, rules)
    for policy, binding in exported_policies(case.rules):
        judges = set(policy["metadata"]["annotations"][RULES_ANNOTATION].split(","))
        expected = [j.finding.message() for j in decision.judged if j.finding.rule in judges]
        rule = ",".join(sorted(judges))
        if not sent_to(policy, binding, case, rules.workloads):
            assert not expected, f"{rule}: the policy is never run, the engine found {expected}"
            continue
        try:
            outcome = evaluate_policy(policy, case.obj, **case.request)
        except Exception as exc:  # the CEL failed: under failurePolicy Fail, refused
            assert decision.unreadable is not None, (
                f"{rule}: the CEL fails ({exc}) on an object the engine reads"
            )
            continue
        if decision.unreadable is not None:
            # The webhook refuses the object whole (a field of an impossible type); the
            # apiserver's own decoding refuses such built-in objects before any policy.
            continue
        assert outcome.failed == bool(expected), f"{rule}: policy {outcome}, engine {expected}"
        if expected:
            fired |= {m.split(":", 1)[0] for m in expected}
            # Findings within one container are listed by name in CEL and in YAML order by
            # the engine: the same lines, compared as a multiset.
            assert sorted(outcome.message.split(SEPARATOR)) == sorted(expected)
    return fired


# --- mutations: the policy's JSON patch against the webhook's -----------------------------------

# The switch of each mutation in the rule settings.
_SWITCHES = {
    "gpu-requests-limits": ("gpu_requests_limits", "fix"),
    "gpu-tolerations": ("gpu_tolerations", "mutate"),
    "gpu-shm": ("gpu_shm", "mutate"),
    "gpu-probe-delays": ("gpu_probe_delays", "mutate"),
    "gpu-priority-class": ("gpu_priority_class", "mutate"),
    "visible-devices": ("visible_devices", "mutate"),
}
# Mutations no policy makes (they label the object from cluster facts): always switched off.
_WEBHOOK_ONLY = {"gpu-queue": ("gpu_queue", "mutate")}


@functools.cache
def _only(rule_file: Path | None, rule: str) -> CompiledRuleSet:
    """The case's rules with every other mutation switched off: the engine's patch is then
    this one mutation's."""
    source = rules_compiled(rule_file).source
    settings = source.rules
    update = {}
    for other, (field, switch) in {**_SWITCHES, **_WEBHOOK_ONLY}.items():
        if other != rule:
            current = getattr(settings, field)
            update[field] = current.model_copy(update={switch: False})
    # gpu-spend's job fields are the webhook's alone: no policy writes them.
    update["gpu_spend"] = settings.gpu_spend.model_copy(update={"mutate": False})
    return compile_rules(source.model_copy(update={"rules": settings.model_copy(update=update)}))


def _agree_on_patches(case: Case) -> set[str]:
    """Compare every mutating policy's patch with the webhook's; the mutations that patched."""
    patched_by: set[str] = set()
    for policy, binding in exported_mutations(case.rules):
        rule = policy["metadata"]["annotations"][RULES_ANNOTATION]
        rules = _only(case.rules, rule)
        assert set(_SWITCHES) == {m.rule for m in MUTATIONS}
        decision = evaluate(case.subject(), rules, None, stage=Stage.MUTATE)
        expected = jsonpatch.apply_patch(case.obj, list(decision.patch))
        if not sent_to(policy, binding, case, rules.workloads):
            assert expected == case.obj, f"{rule}: never run, the webhook patches {decision}"
            continue
        try:
            ops = mutation_patches(policy, case.obj, **case.request)
        except Exception as exc:  # failurePolicy Ignore: the object goes on unpatched
            assert decision.unreadable is not None, f"{rule}: the CEL fails ({exc})"
            continue
        if decision.unreadable is not None:
            continue
        patched = jsonpatch.apply_patch(case.obj, ops or [])
        assert patched == expected, f"{rule}: policy {ops}, webhook {list(decision.patch)}"
        if ops:
            patched_by.add(rule)
            # Reinvoked on its own output, the policy adds nothing.
            again = mutation_patches(policy, patched, **case.request)
            assert again == [], f"{rule}: not idempotent: {again}"
    return patched_by


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=[c.name for c in GOLDEN_CASES])
def test_the_policies_judge_and_patch_each_golden_case_as_the_engine_does(case: Case) -> None:
    _agree(case)
    _agree_on_patches(case)


def _corpus_params() -> list[Any]:
    if not CORPUS_CASES:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{CORPUS} is absent"))]
    return [pytest.param(c, id=c.name) for c in CORPUS_CASES]


@pytest.mark.parametrize("case", _corpus_params())
def test_the_policies_judge_and_patch_each_corpus_object_as_the_engine_does(case: Case) -> None:
    _agree(case)
    _agree_on_patches(case)


def test_the_golden_cases_make_every_exported_rule_fire() -> None:
    # Agreement on objects where a rule never fires proves nothing about that rule.
    exported = {
        r
        for p, _ in exported_policies(None)
        for r in p["metadata"]["annotations"][RULES_ANNOTATION].split(",")
    }
    mutations = {
        p["metadata"]["annotations"][RULES_ANNOTATION] for p, _ in exported_mutations(None)
    }
    assert exported and mutations
    unseen = exported | mutations
    for case in GOLDEN_CASES:
        if case.rules is None:
            unseen -= _agree(case) | _agree_on_patches(case)
        if not unseen:
            break
    assert unseen == set()


# --- helpers the output tests share (test_export_output.py) -----------------------------------


EXEMPTIONS = """\
exemptions:
  namespaces: [kube-system]
  namespaceSelector: {matchLabels: {gpu-admission.io/exempt: "true"}}
  serviceAccounts: ["ml-*/trusted"]
  podSelector: {matchExpressions: [{key: tier, operator: In, values: [system]}]}
"""


@pytest.mark.parametrize(
    ("namespace", "labels", "account", "pod_labels", "exempt"),
    [
        ("ml-team", {}, None, {}, False),
        ("ml-team", {"gpu-admission.io/exempt": "true"}, None, {}, True),
        ("ml-team", {"gpu-admission.io/exempt": "false"}, None, {}, False),
        ("ml-team", None, None, {}, False),  # labels unknown: no selector matches
        ("ml-team", {}, "trusted", {}, True),
        ("ml-team", {}, "other", {}, False),
        ("research", {}, "trusted", {}, False),  # "ml-*/trusted" only
        ("ml-team", {}, None, {"tier": "system"}, True),
        ("ml-team", {}, None, {"tier": "web"}, False),
    ],
)
def test_exemptions_by_labels_and_service_account_as_the_engine(
    tmp_path: Path,
    namespace: str,
    labels: dict[str, str] | None,
    account: str | None,
    pod_labels: dict[str, str],
    exempt: bool,
) -> None:
    rules = compile_rules(load_rules(rule_folder(tmp_path, EXEMPTIONS)))
    export = build(rules)
    assert not [i for i in export.left_out if i.why.startswith("exemptions")]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"metadata": {"labels": pod_labels}, "spec": half_gpu_pod()["spec"]}},
    }
    if account:
        deployment["spec"]["template"]["spec"]["serviceAccountName"] = account  # type: ignore[index]
    case = Case("exemption", deployment, namespace=namespace, labels=labels)
    decision = evaluate(case.subject(), rules, None, stage=Stage.ADMIT)
    assert bool(decision.judged) is not exempt and bool(decision.patch) is not exempt
    (deny,) = [
        o
        for o in export.objects
        if o["metadata"]["name"] == "deny.gpu-admission.io"
        and o["kind"] == "ValidatingAdmissionPolicy"
    ]
    assert evaluate_policy(deny, case.obj, **case.request).failed is not exempt
    (tolerations,) = [
        o
        for o in export.objects
        if o["kind"] == "MutatingAdmissionPolicy"
        and o["metadata"]["name"].startswith("gpu-tolerations")
    ]
    assert bool(mutation_patches(tolerations, case.obj, **case.request)) is not exempt


def test_a_declared_kind_is_judged_at_its_paths_even_through_reserved_words(
    tmp_path: Path,
) -> None:
    # `package` is a CEL reserved word; `*` walks a map's values (`{main: ..., extra: ...}`).
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(
        """\
workloads:
  - group: serving.example.com
    kind: ModelServer
    resource: modelservers
    versions: [v1]
    podTemplates: [spec.package.template, "spec.shards.*.template"]
"""
    )
    pod_spec = half_gpu_pod()["spec"]
    obj = {
        "apiVersion": "serving.example.com/v1",
        "kind": "ModelServer",
        "metadata": {"name": "m"},
        "spec": {
            "package": {"template": {"spec": pod_spec}},
            "shards": {"main": {"template": {"spec": pod_spec}}, "a.b": {"template": {}}},
        },
    }
    case = Case("declared", obj, rules=rule_file)
    assert "gpu-whole-quantity" in _agree(case)
    (policy, _), *_ = exported_policies(rule_file)
    message = evaluate_policy(policy, obj, **case.request).message
    assert "spec.package.template.spec.containers[0].resources" in message
    assert "spec.shards.main.template.spec.containers[0].resources" in message
    assert "gpu-tolerations" in _agree_on_patches(case)
