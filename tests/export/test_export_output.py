"""`gpu-admission export`, its output: valid against the Kubernetes schema, the same bytes for
the same rules, every rule exported or left to the webhook with a reason, and the native
overlay equal to the export of the deployed rules, and the policies with the reduced webhook
(`--webhook-only`) doing what the webhook alone did. Agreement with the engine: test_export.py.
"""

from __future__ import annotations

import copy
import functools
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.support.export import (
    GOLDEN_CASES,
    K8S_SCHEMAS,
    Case,
    exported_mutations,
    exported_policies,
    half_gpu_pod,
    rule_folder,
    rules_compiled,
    sent_to,
)
from tests.support.manifests import require_kubectl
from tests.support.native_cel import evaluate_policy, mutation_patches
from tests.support.paths import ROOT
from webhook.engine import compile_rules, evaluate
from webhook.engine.checks import MUTATIONS, VALIDATIONS
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.decision import Decision
from webhook.engine.pipeline import Stage
from webhook.export.bundle import build
from webhook.export.companion import COMPANION_FILE, webhook_only, webhook_only_settings
from webhook.export.render import describe, render
from webhook.export.scope import RULES_ANNOTATION
from webhook.export.validating import SEPARATOR
from webhook.ruleset.components import CLUSTER_NAMESPACES
from webhook.ruleset.files import load_rules

# --- the output: schema, determinism, what is left out and why -----------------------------------


MIXED_MODES = """\
mode: enforce
exemptions:
  namespaces: [kube-system, "team-*", sandbox]
rules:
  gpu-whole-quantity: {mode: warn}
  gpu-mig-mixed: {mode: audit}
  gpu-init-container: {mode: "off"}
  gpu-requests-limits: {fix: false}
"""


@pytest.mark.parametrize("version", K8S_SCHEMAS)
@pytest.mark.parametrize("rule_text", [None, MIXED_MODES], ids=["shipped", "mixed-modes"])
def test_every_exported_object_validates_against_the_kubernetes_schema(
    version: str, rule_text: str | None, tmp_path: Path
) -> None:
    rules = ROOT / "rules" if rule_text is None else rule_folder(tmp_path, rule_text)
    text = render(build(compile_rules(load_rules(rules))), "1.36", "test")
    docs = [d for d in yaml.safe_load_all(text) if d]
    kinds = {d["kind"] for d in docs}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    assert {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} <= kinds
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
        # cel-go refuses an expression of more than 100,000 code points.
        for expression in _expressions(doc):
            assert len(expression) < 100_000


def _expressions(doc: dict[str, Any]) -> list[str]:
    spec = doc["spec"]
    found = [c["expression"] for c in spec.get("matchConditions", [])]
    found += [v["expression"] for v in spec.get("variables", [])]
    for v in spec.get("validations", []):
        found += [v["expression"], v["messageExpression"]]
    found += [m["jsonPatch"]["expression"] for m in spec.get("mutations", [])]
    return found


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "export", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_the_same_rules_give_byte_identical_output(tmp_path: Path) -> None:
    rules = rule_folder(tmp_path, MIXED_MODES)
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        done = _cli("--rules", str(rules), "--out", str(out))
        assert done.returncode == 0, done.stderr
    written = first / "policies.yaml"
    assert written.read_bytes() == (second / "policies.yaml").read_bytes()
    # In process, from a fresh parse of the same files: the same text again.
    again = render(build(compile_rules(load_rules(rules))), "1.36", "x")
    assert again.split("---\n", 1)[1] == written.read_text().split("---\n", 1)[1]


def test_a_rule_change_changes_the_output(tmp_path: Path) -> None:
    # The parameters are baked in: exporting after a change is what keeps them in step.
    before = render(build(compile_rules(load_rules(None))), "1.36", "x")
    folder = rule_folder(tmp_path, "gpuResources: [nvidia.com/gpu, example.com/npu]\n")
    after = render(build(compile_rules(load_rules(folder))), "1.36", "x")
    assert "example.com/npu" in after and "example.com/npu" not in before


def test_every_rule_is_exported_or_left_to_the_webhook_with_a_reason(tmp_path: Path) -> None:
    done = _cli("--rules", str(rule_folder(tmp_path, MIXED_MODES)))
    assert done.returncode == 0, done.stderr
    result = build(compile_rules(load_rules(tmp_path / "rules")))
    for part, rules in (("validation", VALIDATIONS), ("mutation", MUTATIONS)):
        exported = {rule for rule, kind, _ in result.exported if kind == part}
        left = {item.rule for item in result.left_out if item.part == part}
        assert exported | left == {r.rule for r in rules}, part
        assert not exported & left, part
    left_out = {(i.rule, i.part): i.why for i in result.left_out}
    assert left_out[("gpu-init-container", "validation")] == "its mode is off"
    assert left_out[("gpu-requests-limits", "mutation")] == "switched off in the rules"
    for item in result.left_out:
        assert item.why.strip()
        assert f"left to the webhook: {describe(item)}" in done.stderr.splitlines()
        assert f"#   {describe(item)}" in done.stdout  # the header of the output says it too


def test_before_1_36_the_mutations_are_left_to_the_webhook() -> None:
    result = build(compile_rules(load_rules(None)), (1, 35))
    assert {o["kind"] for o in result.objects} == {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    left = {i.rule for i in result.left_out if i.part == "mutation"}
    assert left == {m.rule for m in MUTATIONS}


def test_each_mode_gets_its_validation_action(tmp_path: Path) -> None:
    result = build(compile_rules(load_rules(rule_folder(tmp_path, MIXED_MODES))))
    actions = {
        rule: o["spec"]["validationActions"]
        for o in result.objects
        if o["kind"] == "ValidatingAdmissionPolicyBinding"
        for p in result.objects
        if p["kind"] == "ValidatingAdmissionPolicy"
        and p["metadata"]["name"] == o["metadata"]["name"]
        for rule in p["metadata"]["annotations"][RULES_ANNOTATION].split(",")
    }
    assert actions == {
        "gpu-requests-limits": ["Deny"],
        "gpu-memory-limit": ["Warn"],
        "gpu-readiness-probe": ["Warn"],
        "gpu-whole-quantity": ["Warn"],
        "gpu-mig-mixed": ["Audit"],
    }


def test_shadow_mode_exports_every_rule_as_audit(tmp_path: Path) -> None:
    result = build(compile_rules(load_rules(rule_folder(tmp_path, "mode: audit\n"))))
    bindings = [o for o in result.objects if o["kind"].endswith("Binding")]
    # Shadow mode changes nothing: no mutating policy, every validation audited.
    assert [b["spec"]["validationActions"] for b in bindings] == [["Audit"]]


def test_an_override_of_a_rule_leaves_it_to_the_webhook(tmp_path: Path) -> None:
    text = """\
overrides:
  - name: research
    namespaces: [research]
    rules:
      gpu-memory-limit: {mode: enforce}
"""
    result = build(compile_rules(load_rules(rule_folder(tmp_path, text))))
    left = {item.rule: item.why for item in result.left_out}
    assert "research" in left["gpu-memory-limit"]
    assert "gpu-memory-limit" not in {rule for rule, _, _ in result.exported}


def test_exempt_namespace_patterns_skip_the_policy(tmp_path: Path) -> None:
    result = build(compile_rules(load_rules(rule_folder(tmp_path, MIXED_MODES))))
    (policy,) = [
        o
        for o in result.objects
        if o["kind"] == "ValidatingAdmissionPolicy"
        and "gpu-whole-quantity" in o["metadata"]["annotations"][RULES_ANNOTATION]
    ]
    pod = half_gpu_pod()
    assert evaluate_policy(policy, pod, namespace="ml-team").failed
    assert not evaluate_policy(policy, pod, namespace="team-a").matched
    assert evaluate_policy(policy, pod, namespace="teams").matched  # "team-*" needs the dash
    (binding,) = [
        o
        for o in result.objects
        if o["kind"] == "ValidatingAdmissionPolicyBinding"
        and o["metadata"]["name"] == policy["metadata"]["name"]
    ]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector == [
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": [*CLUSTER_NAMESPACES, "sandbox"],  # listed ones add to these
        }
    ]


def test_a_controller_update_is_judged_only_when_its_template_changed() -> None:
    (policy, _), *_ = exported_policies(None)
    template = {"spec": half_gpu_pod()["spec"]}
    old = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "template": template},
    }
    scaled = copy.deepcopy(old)
    scaled["spec"]["replicas"] = 3  # type: ignore[index]
    assert not evaluate_policy(policy, scaled, operation="UPDATE", old=old).failed
    changed = copy.deepcopy(old)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "vllm:2"  # type: ignore[index]
    outcome = evaluate_policy(policy, changed, operation="UPDATE", old=old)
    assert outcome.failed and "spec.template.spec.containers[0]" in outcome.message
    assert evaluate_policy(policy, old, operation="CREATE").failed


def test_a_kubernetes_version_before_the_cel_it_needs_is_refused() -> None:
    done = _cli("--kubernetes", "1.30")
    assert done.returncode == 2
    assert "1.34 or later" in done.stderr
    assert done.stdout == ""


# --- manifests/overlays/native ----------------------------------------------------------------

NATIVE = ROOT / "manifests" / "overlays" / "native"
BASE_RULES = Path("manifests") / "base" / "rules"


def test_the_native_overlay_holds_the_export_of_the_deployed_rules() -> None:
    # As manifests/base/webhooks.yaml: generated, never edited by hand.
    for extra, name in (((), "policies.yaml"), (("--webhook-only",), COMPANION_FILE)):
        done = _cli("--rules", str(BASE_RULES), "--kubernetes", "1.36", *extra)
        assert done.returncode == 0, done.stderr
        assert (NATIVE / name).read_text() == done.stdout, (
            f"regenerate {name}: see manifests/overlays/native/kustomization.yaml"
        )


def test_the_native_overlay_deploys_the_policies_and_the_reduced_webhook(tmp_path: Path) -> None:
    kubectl = require_kubectl("the native overlay's rendering")
    rendered = subprocess.run(
        [kubectl, "kustomize", str(NATIVE)], capture_output=True, text=True, timeout=60
    )
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    policies = [d for d in docs if "AdmissionPolicy" in d["kind"]]
    assert len(policies) == len(
        [d for d in yaml.safe_load_all((NATIVE / "policies.yaml").read_text()) if d]
    )
    for policy in policies:
        assert "namespace" not in policy["metadata"]  # cluster-scoped
        kubernetes_validate.validate(policy, "1.36", strict=True)
    assert {d["kind"] for d in docs} >= {"Deployment", "ValidatingWebhookConfiguration"}
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert configmap["metadata"]["name"] == "gpu-admission-rules"  # the one the webhook mounts
    for name, text in configmap["data"].items():
        (tmp_path / name).write_text(text)
    webhook_rules = compile_rules(load_rules(tmp_path)).base
    exported = build(compile_rules(load_rules(ROOT / BASE_RULES))).exported
    for rule, part, _ in exported:
        if part == "validation":
            assert webhook_rules.mode(rule).value == "off", rule
        else:
            assert rule not in {m.rule for m in webhook_rules.mutations}, rule


# --- --webhook-only: the policies and the reduced webhook together are the webhook alone ---------


@functools.cache
def _webhook_only(rule_file: Path | None) -> CompiledRuleSet:
    """The case's rules with the companion rule file laid over them, as the webhook loads it."""
    source = rules_compiled(rule_file).source
    with tempfile.TemporaryDirectory(prefix="export-companion-") as tmp:
        folder = Path(tmp)
        (folder / "rules.yaml").write_text(
            (rule_file or ROOT / "rules" / "gpu-admission.yaml").read_text()
        )
        export = build(compile_rules(source))
        (folder / COMPANION_FILE).write_text(webhook_only(export, "test"))
        return compile_rules(load_rules(folder))


def _split(case: Case) -> None:
    full = rules_compiled(case.rules)
    reduced = _webhook_only(case.rules)

    def engine(rules: CompiledRuleSet, obj: dict[str, Any], stage: Stage) -> Decision:
        return evaluate(case.subject(obj), rules, None, stage=stage)

    alone = engine(full, case.obj, Stage.MUTATE)
    if alone.unreadable is not None:
        return
    # The apiserver runs the mutating policies, then the mutating webhook.
    native = case.obj
    for policy, binding in exported_mutations(case.rules):
        if sent_to(policy, binding, case, full.workloads):
            ops = mutation_patches(policy, native, **case.request)
            native = jsonpatch.apply_patch(native, ops or [])
    both = jsonpatch.apply_patch(native, list(engine(reduced, native, Stage.MUTATE).patch))
    assert both == jsonpatch.apply_patch(case.obj, list(alone.patch))
    # Then validation of the patched object: the findings are split, none lost or doubled.
    findings = [j.finding.message() for j in engine(full, both, Stage.VALIDATE).judged]
    kept = [j.finding.message() for j in engine(reduced, both, Stage.VALIDATE).judged]
    native_findings = []
    for policy, binding in exported_policies(case.rules):
        if sent_to(policy, binding, case, full.workloads):  # the same kind and request
            outcome = evaluate_policy(policy, both, **case.request)
            if outcome.failed:
                native_findings += outcome.message.split(SEPARATOR)
    assert sorted(kept + native_findings) == sorted(findings)


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=[c.name for c in GOLDEN_CASES])
def test_the_policies_with_the_reduced_webhook_do_what_the_webhook_did(case: Case) -> None:
    _split(case)


def test_the_companion_switches_off_exactly_what_was_exported() -> None:
    export = build(compile_rules(load_rules(None)))
    settings = webhook_only_settings(export)["rules"]
    assert settings["gpu-requests-limits"] == {"mode": "off", "fix": False}
    assert settings["gpu-tolerations"] == {"mutate": False}
    left = {i.rule for i in export.left_out}
    assert not set(settings) & (left - {r for r, _, _ in export.exported})
