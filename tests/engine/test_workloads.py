"""Workload kinds: a CRD a platform team declares in `workloads:` gets every rule, the audit and
the generated webhook routing with no code change; the shipped kinds are declared the same way.

The end to end case goes the whole way a user would: rule file -> the real HTTPS server's
patch (applied, its pod specs schema-checked) -> the audit's verdict -> the rendered webhook
configurations (schema-valid, routing the kind, their CEL selecting the object).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import cel
import kubernetes_validate
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.support.paths import K8S_VERSION
from tests.support.schema import assert_schema_valid
from webhook.audit.manifests import Document
from webhook.audit.run import AuditResult, Skipped, audit
from webhook.cli import main
from webhook.engine.compiled import compile_rules
from webhook.engine.workloads import DEFAULT_TABLE, workload_table
from webhook.rulecli.routingcel import gpu_workload_condition
from webhook.ruleset.files import load_rules
from webhook.ruleset.models import RuleSet
from webhook.ruleset.workloads import LIST_ITEMS, MAP_VALUES, WorkloadKind, parse_path

DECLARED = {
    "group": "serving.example.com",
    "kind": "ModelServer",
    "resource": "modelservers",
    "versions": ["v1"],
    "podTemplates": ["spec.server.template", "spec.shards[*].template"],
    "replicas": "spec.replicas",
}


def _template(gpus: str | None, name: str) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": gpus, "memory": "32Gi"}} if gpus else {}
    return {
        "spec": {"containers": [{"name": name, "image": "example/x:1", "resources": resources}]}
    }


def _model_server(expert_gpus: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "serving.example.com/v1",
        "kind": "ModelServer",
        "metadata": {"name": "mixtral", "namespace": "ml-team"},
        "spec": {
            "replicas": 2,
            "server": {"template": _template("2", "server")},
            "shards": [
                {"name": "router", "template": _template(None, "router")},
                {"name": "experts", "template": _template(expert_gpus, "expert")},
            ],
        },
    }


def _rules_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "gpu-admission.yaml").write_text(yaml.safe_dump({"workloads": [DECLARED]}))
    return folder


# --- a declared CRD, end to end ------------------------------------------------------------------


def test_a_declared_crd_is_patched_over_https_and_every_gpu_template_gets_the_mutations(
    webhook_with: Any,
) -> None:
    hook = webhook_with({}, workloads=[DECLARED])
    obj = _model_server()
    mutated, mutation, verdict = hook.admit(obj)
    assert verdict.allowed, verdict.message
    paths = [op["path"] for op in mutation.patch]
    assert any(p.startswith("/spec/server/template/spec/") for p in paths)
    assert any(p.startswith("/spec/shards/1/template/spec/") for p in paths)
    assert not any(p.startswith("/spec/shards/0/") for p in paths)  # the router asks no GPU
    gpu_specs = (mutated["spec"]["server"]["template"]["spec"],
                 mutated["spec"]["shards"][1]["template"]["spec"])  # fmt: skip
    for spec in gpu_specs:
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
        assert any(m["mountPath"] == "/dev/shm" for m in spec["containers"][0]["volumeMounts"])
    assert "tolerations" not in mutated["spec"]["shards"][0]["template"]["spec"]
    table = compile_rules(RuleSet.model_validate({"workloads": [DECLARED]})).workloads
    assert_schema_valid(mutated, table)
    assert hook.mutate(mutated).patch == []  # reinvocation changes nothing


def test_a_declared_crd_with_half_a_gpu_is_denied_naming_its_field(webhook_with: Any) -> None:
    hook = webhook_with({}, workloads=[DECLARED])
    answer = hook.validate(_model_server(expert_gpus="0.5"))
    assert not answer.allowed
    assert 'spec.shards[1].template.spec.containers[0].resources.limits["nvidia.com/gpu"]' in (
        answer.message
    )


def test_without_the_declaration_the_same_object_is_left_alone(webhook: Any) -> None:
    answer = webhook.validate(_model_server(expert_gpus="0.5"))
    assert answer.allowed and answer.patch == []


def test_the_audit_judges_a_declared_crd_from_the_same_rule_file(tmp_path: Path) -> None:
    rules = compile_rules(load_rules(_rules_dir(tmp_path)))
    docs = [Document("x.yaml#0", _model_server()), Document("x.yaml#1", _model_server("0.5"))]
    good, bad = list(audit(docs, rules))
    assert isinstance(good, AuditResult) and isinstance(bad, AuditResult)
    assert good.decision.allowed and good.decision.patch
    assert not bad.decision.allowed
    assert {f.rule for f in bad.decision.denials} == {"gpu-whole-quantity"}
    (skipped,) = audit(docs[:1], compile_rules(RuleSet()))
    assert isinstance(skipped, Skipped)


def _selects(condition: str, obj: dict[str, Any]) -> bool:
    context = cel.Context()
    context.add_variable("object", obj)
    result = cel.compile(condition).execute(context)
    assert isinstance(result, bool)
    return result


def test_the_rendered_webhooks_route_the_declared_crd_and_select_only_its_gpu_objects(
    tmp_path: Path,
) -> None:
    out = tmp_path / "webhooks.yaml"
    assert main(["rules", "webhooks", str(_rules_dir(tmp_path)), "--out", str(out)]) == 0
    docs = list(yaml.safe_load_all(out.read_text()))
    assert [d["kind"] for d in docs] == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        # the pod webhook of each (the validating one also guards sharing ConfigMaps)
        hook = doc["webhooks"][0]
        assert {
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": ["serving.example.com"],
            "apiVersions": ["v1"],
            "resources": ["modelservers"],
            "scope": "Namespaced",
        } in hook["rules"]
        condition = next(c for c in hook["matchConditions"] if c["name"] == "gpu-workload")
        assert _selects(condition["expression"], _model_server())
        cpu_only = _model_server()
        for shard in (cpu_only["spec"]["server"], *cpu_only["spec"]["shards"]):
            shard["template"] = _template(None, "cpu")
        assert not _selects(condition["expression"], cpu_only)


def test_rules_check_reminds_to_regenerate_the_webhooks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _rules_dir(tmp_path)
    assert main(["rules", "check", str(folder)]) == 0
    assert f"gpu-admission rules webhooks --rules {folder}" in capsys.readouterr().out


# --- shipped kinds through the same condition ------------------------------------------------


def _trainjob(resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "ft"},
        "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"resourcesPerNode": resources}},
    }


def test_a_trainjob_is_selected_by_the_gpus_of_its_trainer_alone() -> None:
    condition = gpu_workload_condition(compile_rules(RuleSet()))
    assert _selects(condition, _trainjob({"limits": {"nvidia.com/gpu": 4}}))
    assert _selects(condition, _trainjob({"requests": {"amd.com/gpu": "1"}}))
    assert not _selects(condition, _trainjob({"limits": {"cpu": "8"}}))
    assert not _selects(condition, _trainjob({"limits": {"nvidia.com/gpu": "0"}}))
    no_trainer = _trainjob({})
    del no_trainer["spec"]["trainer"]
    assert not _selects(condition, no_trainer)


def test_nim_services_are_selected_by_their_spec_and_pipelines_by_each_service() -> None:
    condition = gpu_workload_condition(compile_rules(RuleSet()))

    def spec(gpus: int) -> dict[str, Any]:
        return {"image": {"repository": "nvcr.io/nim/x", "tag": "1"},
                "resources": {"limits": {"nvidia.com/gpu": gpus}}}  # fmt: skip

    service = {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService", "spec": spec(1)}
    assert _selects(condition, service)
    assert not _selects(condition, {**service, "spec": spec(0)})
    pipeline = {
        "apiVersion": "apps.nvidia.com/v1alpha1",
        "kind": "NIMPipeline",
        "spec": {
            "services": [{"name": "embed", "spec": spec(0)}, {"name": "llm", "spec": spec(2)}]
        },
    }
    assert _selects(condition, pipeline)
    pipeline["spec"]["services"][1]["spec"] = spec(0)  # type: ignore[index]
    assert not _selects(condition, pipeline)


def test_a_pod_with_resource_claims_is_selected_for_the_webhook_to_resolve() -> None:
    condition = gpu_workload_condition(compile_rules(RuleSet()))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }
    assert _selects(condition, pod)
    del pod["spec"]["resourceClaims"]  # type: ignore[attr-defined]
    assert not _selects(condition, pod)


def test_a_gpu_resource_pattern_of_any_shape_is_selected_as_the_engine_matches_it() -> None:
    rules = compile_rules(
        RuleSet.model_validate({"gpuResources": ["example.com/accel-?", "vendor.io/[ab]gpu"]})
    )
    condition = gpu_workload_condition(rules)
    for name, chosen in [
        ("example.com/accel-1", True),
        ("example.com/accel-12", False),
        ("vendor.io/agpu", True),
        ("vendor.io/cgpu", False),
    ]:
        container = {"name": "c", "resources": {"limits": {name: "1"}}}
        pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [container]}}
        assert rules.base.is_gpu(name) is chosen
        assert _selects(condition, pod) is chosen, name


@pytest.mark.parametrize(
    "spec",
    [
        {"model": "llama-3", "worker": 4, "template": "x", "tasks": {"a": 1}},  # other kinds' paths
        {"server": "x", "shards": {"router": {"template": {}}}},  # a map where a list is declared
        {"server": {"template": ["x"]}, "shards": ["x", 1, None, {"template": 7}]},
        {"server": {"template": {"spec": {"containers": ["x", 1], "model": "llama"}}}},
    ],
)
def test_the_condition_never_fails_on_a_field_of_another_shape(spec: dict[str, Any]) -> None:
    """An evaluation error counts as a webhook failure, and the validating webhook fails
    closed: a declared CRD whose fields do not look like another kind's paths, or like its own
    declaration, is simply not selected."""
    rules = compile_rules(RuleSet.model_validate({"workloads": [DECLARED]}))
    obj = {"apiVersion": "serving.example.com/v1", "kind": "ModelServer", "spec": spec}
    assert _selects(gpu_workload_condition(rules), obj) is False


def test_a_path_is_read_only_in_the_kinds_that_declare_it() -> None:
    condition = gpu_workload_condition(compile_rules(RuleSet()))
    trainer = {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}}}}
    as_trainjob = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"}
    assert _selects(condition, {**as_trainjob, "spec": trainer})
    for other in ("trainer.kubeflow.org/v1alpha1", "example.com/v1"):
        obj = {"apiVersion": other, "kind": "Other", "spec": trainer}
        assert _selects(condition, obj) is False


# --- declarations -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("", "may not be empty"),
        ("spec..template", "is not a field name"),
        ("spec.a-b", "is not a field name"),
        ("spec.tasks[*].workers[*].template", "at most one"),
        ("spec.roles.*.groups[*]", "at most one"),
        ("spec.tasks[0]", "is not a field name"),
    ],
)
def test_a_bad_path_is_refused_at_load_naming_it(path: str, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        WorkloadKind.model_validate({**DECLARED, "podTemplates": [path]})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("group", "*"),
        ("group", "Example.com"),
        ("group", "example.com/v1"),
        ("versions", ["v1]\n  - x"]),
        ("versions", ["1"]),
        ("versions", []),
        ("resource", "ModelServers"),
        ("kind", "modelServer"),
    ],
)
def test_names_that_would_not_be_valid_in_a_webhook_rule_are_refused(
    field: str, value: Any
) -> None:
    # They are written into the generated webhook configurations as they are.
    with pytest.raises(ValidationError):
        WorkloadKind.model_validate({**DECLARED, field: value})


def test_a_declaration_must_say_where_its_pods_are() -> None:
    with pytest.raises(ValidationError, match="where its pods are"):
        WorkloadKind.model_validate({**DECLARED, "podTemplates": []})


def test_a_kind_may_be_declared_once_and_pod_never() -> None:
    with pytest.raises(ValidationError, match="declared once"):
        RuleSet.model_validate({"workloads": [DECLARED, DECLARED]})
    pod = {"group": "", "kind": "Pod", "resource": "pods", "versions": ["v1"], "podSpecs": ["x"]}
    with pytest.raises(ValidationError, match="Pod is built in"):
        RuleSet.model_validate({"workloads": [pod]})


def test_declaring_a_shipped_kind_replaces_it_in_place() -> None:
    mine = WorkloadKind.model_validate(
        {
            "group": "serving.kserve.io",
            "kind": "InferenceService",
            "resource": "inferenceservices",
            "versions": ["v1beta1"],
            "podSpecs": ["spec.predictor"],
        }
    )
    table = workload_table([mine])
    assert [w.kind for w in table.kinds] == [w.kind for w in DEFAULT_TABLE.kinds]
    found = table.get("serving.kserve.io", "InferenceService")
    assert found is not None and found.spec_paths == (("spec", "predictor"),)


_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)


@given(st.lists(_NAMES, min_size=1, max_size=6), st.data())
def test_a_path_of_field_names_and_one_wildcard_parses_to_its_segments(
    names: list[str], data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(names)))
    wild = data.draw(st.sampled_from(["", "list", "map"]))
    parts = copy.copy(names)
    expected: list[str] = list(names)
    if wild == "list":
        parts[at - 1 if at else 0] += LIST_ITEMS
        expected.insert(at if at else 1, LIST_ITEMS)
    elif wild == "map":
        parts.insert(at, MAP_VALUES)
        expected.insert(at, MAP_VALUES)
    assert parse_path(".".join(parts)) == tuple(expected)


@given(st.text(max_size=40))
def test_any_text_either_parses_or_is_refused_with_a_reason(text: str) -> None:
    try:
        segments = parse_path(text)
    except ValueError as exc:
        assert repr(text)[:10] in str(exc) or "empty" in str(exc)
    else:
        assert all(s in (LIST_ITEMS, MAP_VALUES) or s.isidentifier() for s in segments)
