"""gpu-spend's job fields, and a suspended job released by an update (the golden cases
`spend-*` and `quota-budget-*suspended*`/`-released-*` show whole objects)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.paths import ROOT
from webhook.engine.checks.spend import object_patch
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import evaluate
from webhook.engine.subject import subject_for
from webhook.engine.workloads import DEFAULT_TABLE
from webhook.ruleset.models import RuleSet, SpendRule

JOB = yaml.safe_load((ROOT / "tests/golden/spend-job-ttl-and-deadline-set/input.yaml").read_text())
SPEND = SpendRule.model_validate({"ttlSecondsAfterFinished": 60, "activeDeadlineSeconds": 600})


def _rules(**spend: Any) -> Any:
    return compile_rules(RuleSet.model_validate({"rules": {"gpu-spend": spend}}))


def test_nothing_is_set_or_limited_by_default() -> None:
    decision = evaluate(subject_for(copy.deepcopy(JOB), namespace="ml"), _rules(), None)
    assert decision.allowed
    assert "gpu-spend" not in decision.mutated_by


def test_mode_off_sets_nothing() -> None:
    rules = _rules(mode="off", ttlSecondsAfterFinished=60)
    decision = evaluate(subject_for(copy.deepcopy(JOB), namespace="ml"), rules, None)
    assert "gpu-spend" not in decision.mutated_by


def test_a_job_asking_no_gpu_is_left_alone() -> None:
    job = copy.deepcopy(JOB)
    del job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    decision = evaluate(subject_for(job, namespace="ml"), _rules(ttlSecondsAfterFinished=60), None)
    assert "gpu-spend" not in decision.mutated_by


def test_a_kubeflow_job_gets_a_run_policy_or_the_fields_in_its_own() -> None:
    pytorch = DEFAULT_TABLE.get("kubeflow.org", "PyTorchJob")
    assert pytorch is not None
    assert object_patch({"spec": {}}, pytorch, SPEND) == [
        {
            "op": "add",
            "path": "/spec/runPolicy",
            "value": {"ttlSecondsAfterFinished": 60, "activeDeadlineSeconds": 600},
        }
    ]
    assert object_patch({"spec": {"runPolicy": {"activeDeadlineSeconds": 5}}}, pytorch, SPEND) == [
        {"op": "add", "path": "/spec/runPolicy/ttlSecondsAfterFinished", "value": 60}
    ]


def test_a_job_set_has_a_ttl_and_no_deadline_of_its_own() -> None:
    jobset = DEFAULT_TABLE.get("jobset.x-k8s.io", "JobSet")
    assert jobset is not None
    assert object_patch({"spec": {}}, jobset, SPEND) == [
        {"op": "add", "path": "/spec/ttlSecondsAfterFinished", "value": 60}
    ]


_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["spec", "runPolicy", "activeDeadlineSeconds", "x"]), inner, max_size=3
        ),
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(_VALUES, st.sampled_from(["Job", "PyTorchJob", "RayJob", "JobSet"]))
def test_any_object_gets_a_patch_that_applies_and_sets_only_unset_fields(
    obj: Any, kind: str
) -> None:
    group = {"Job": "batch", "PyTorchJob": "kubeflow.org", "RayJob": "ray.io"}.get(
        kind, "jobset.x-k8s.io"
    )
    workload = DEFAULT_TABLE.get(group, kind)
    assert workload is not None
    ops = object_patch(obj, workload, SPEND)
    if not ops:
        return
    after = jsonpatch.JsonPatch(ops).apply(copy.deepcopy(obj))
    for path, value in ((workload.ttl, 60), (workload.deadline, 600)):
        node: Any = after
        for key in path or ():
            node = node.get(key) if isinstance(node, dict) else None
        if path is not None and node is not None:
            before: Any = obj
            for key in path:
                before = before.get(key) if isinstance(before, dict) else None
            assert node == (before if before is not None else value)


# --- suspended jobs ---------------------------------------------------------------------------

OLD_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "old", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
    "spec": {
        "suspend": True,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                ],
            }
        },
    },
}


def test_a_release_judges_the_unchanged_template_against_budgets_alone_and_patches_nothing() -> (
    None
):
    """Kueue's unsuspend is an update the apiserver allows on a Job only within its mutable
    fields: a patch adding /dev/shm or tolerations to the template would fail the admission.
    So the release brings the budgets, and nothing else."""
    new = copy.deepcopy(OLD_JOB)
    new["spec"]["suspend"] = False  # type: ignore[index]
    rules = compile_rules(RuleSet())
    decision = evaluate(
        subject_for(new, namespace="ml", operation="UPDATE", old_obj=OLD_JOB), rules, None
    )
    assert decision.patch == ()
    assert decision.judged == ()  # without facts gpu-quota is not run; no other rule is


def test_a_suspend_field_that_is_no_boolean_suspends_nothing() -> None:
    job = DEFAULT_TABLE.get("batch", "Job")
    assert job is not None
    assert job.suspended({"spec": {"suspend": True}})
    for odd in ({"spec": {"suspend": "true"}}, {"spec": "x"}, [], None, {"spec": {}}):
        assert not job.suspended(odd)
