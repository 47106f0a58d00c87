"""Rule sets that cannot surprise: settings that each pass validation but cannot hold together
are refused where they are written (file:line:col, with a Fix) by `rules check`, by the loader
`serve` and `audit` use, and by the hot reload, which keeps the rules in service."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.paths import ROOT
from webhook.engine.admit import Decided, Request, admit
from webhook.engine.compiled import compile_rules
from webhook.facts.snapshotfile import load_snapshot
from webhook.rulecli.commands import explain
from webhook.ruleset.contradictions import duplicate_budgets
from webhook.ruleset.files import RuleFileError, load_rules, load_rules_with_sources
from webhook.ruleset.models import RuleSet
from webhook.server.reload import RuleHolder

SNAPSHOT = ROOT / "examples" / "cluster-snapshot.yaml"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "rules", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def refused(folder: Path) -> list[str]:
    with pytest.raises(RuleFileError) as caught:
        load_rules(folder)
    return caught.value.problems


def gpu_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
            ],
            **spec,
        },
    }


def test_a_default_class_outside_the_allowed_classes_is_refused_at_the_default(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.yaml").write_text(
        "rules:\n  gpu-priority-class:\n    defaultClass: gpu-nightly\n"
        "    allowedClasses: [gpu-serving, gpu-training]\n"
    )
    assert refused(tmp_path) == [
        f"{tmp_path}/r.yaml:3:19: rules.gpu-priority-class.defaultClass: defaultClass "
        "'gpu-nightly' is not in allowedClasses (gpu-serving, gpu-training): every GPU pod that "
        "names no class would get it and then be denied. Fix: add gpu-nightly to "
        "allowedClasses, or set defaultClass to one of: gpu-serving, gpu-training"
    ]


def test_an_override_narrowing_the_allowed_classes_below_the_base_default_is_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.yaml").write_text(
        yaml.safe_dump(
            {
                "rules": {"gpu-priority-class": {"defaultClass": "gpu-batch"}},
                "overrides": [
                    {
                        "name": "serving",
                        "namespaces": ["inference"],
                        "rules": {"gpu-priority-class": {"allowedClasses": ["gpu-serving"]}},
                    }
                ],
            },
            sort_keys=False,
        )
    )
    (problem,) = refused(tmp_path)
    assert problem.startswith(f"{tmp_path}/r.yaml:")
    assert (
        "overrides.0.rules.gpu-priority-class.allowedClasses: defaultClass 'gpu-batch'" in problem
    )
    assert "Fix: add gpu-batch to allowedClasses" in problem


def _budgets(*budgets: dict[str, Any]) -> str:
    return yaml.safe_dump({"rules": {"gpu-quota": {"budgets": list(budgets)}}}, sort_keys=False)


def test_two_budgets_over_one_namespace_and_resource_are_refused_at_the_second(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.yaml").write_text(
        _budgets(
            {"name": "ml", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 16}},
            {"name": "ml-h100", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 8}},
        )
    )
    assert refused(tmp_path) == [
        f"{tmp_path}/r.yaml:13:9: rules.gpu-quota.budgets.1.limits.nvidia.com/gpu: budgets 'ml' "
        "and 'ml-h100' both cap nvidia.com/gpu in namespace ml-team: the webhook judges both "
        "and `export` writes a ResourceQuota for each. Fix: keep one budget for namespace "
        "ml-team: merge 'ml-h100' into 'ml', or remove nvidia.com/gpu from one of them"
    ]


def test_export_writes_no_quotas_for_one_namespace_budgeted_twice(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        _budgets(
            {"name": "ml", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 16}},
            {"name": "ml-h100", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 8}},
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "export", "--rules", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert f"{tmp_path}/r.yaml:13:9: rules.gpu-quota.budgets.1.limits" in result.stderr


def test_the_same_budget_in_two_files_is_refused_in_the_later_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        _budgets({"name": "ml", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 16}})
    )
    # A later file's budgets list replaces the earlier one whole: the same namespace twice
    # in it is the contradiction, reported in that file.
    (tmp_path / "b.yaml").write_text(
        _budgets(
            {"name": "ml", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 16}},
            {"name": "ml2", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 4}},
        )
    )
    (problem,) = refused(tmp_path)
    assert problem.startswith(f"{tmp_path}/b.yaml:13:9: rules.gpu-quota.budgets.1.limits")


def test_a_budget_nested_in_a_wider_one_or_on_another_resource_is_accepted(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.yaml").write_text(
        _budgets(
            {"name": "ml", "namespaces": ["ml-a", "ml-b"], "limits": {"nvidia.com/gpu": 16}},
            {"name": "ml-a", "namespaces": ["ml-a"], "limits": {"nvidia.com/gpu": 8}},
            {"name": "ml-a-mig", "namespaces": ["ml-a"], "limits": {"nvidia.com/mig-1g.10gb": 7}},
        )
    )
    assert len(load_rules(tmp_path).rules.gpu_quota.budgets) == 3


NAMESPACES = st.sampled_from(["a", "b", "team-*"])
RESOURCES = st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.frozensets(NAMESPACES, min_size=1), st.frozensets(RESOURCES, min_size=1)),
        max_size=5,
    )
)
def test_budgets_are_refused_exactly_when_two_select_the_same_namespaces_and_resource(
    drawn: list[tuple[frozenset[str], frozenset[str]]],
) -> None:
    budgets = [
        {"name": f"b{i}", "namespaces": sorted(names), "limits": dict.fromkeys(sorted(res), 1)}
        for i, (names, res) in enumerate(drawn)
    ]
    rules = RuleSet.model_validate({"rules": {"gpu-quota": {"budgets": budgets}}})
    twice = [
        (i, r)
        for i, (names, res) in enumerate(drawn)
        for r in sorted(res)
        if any(names == other and r in res2 for other, res2 in drawn[:i])
    ]
    found = duplicate_budgets(rules)
    assert [(p.loc[3], p.loc[5]) for p in found] == twice


def _crossing_overrides(second: dict[str, Any]) -> dict[str, Any]:
    """Each override fits the base (maxSize 64Gi) on its own; where both apply, the more
    specific one's maxSize comes down below the other's minSize."""
    return {
        "rules": {"gpu-shm": {"maxSize": "64Gi"}},
        "overrides": [
            {
                "name": "big-shm",
                "namespaces": ["research-*"],
                "rules": {"gpu-shm": {"minSize": "32Gi"}},
            },
            {"name": "small-shm", **second, "rules": {"gpu-shm": {"maxSize": "16Gi"}}},
        ],
    }


def test_overrides_that_cross_in_a_namespace_they_name_are_refused_at_the_later_one(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.yaml").write_text(
        yaml.safe_dump(_crossing_overrides({"namespaces": ["research-1"]}), sort_keys=False)
    )
    (problem,) = refused(tmp_path)
    assert problem == (
        f"{tmp_path}/r.yaml:16:16: overrides.1.rules.gpu-shm.maxSize: gpu-shm.minSize 32Gi "
        "(override 'big-shm') is above gpu-shm.maxSize 16Gi (override 'small-shm') for "
        "namespace research-1; maxSize holds. Fix: make gpu-shm agree between override "
        "'small-shm' and 'big-shm' where both apply (change minSize or maxSize in one of "
        "them), or narrow one override's namespaces"
    )


def test_the_crossing_is_what_explain_shows_for_that_namespace(tmp_path: Path) -> None:
    """One finding, two front doors: the check and `rules explain` say the same sentence."""
    (tmp_path / "r.yaml").write_text(
        yaml.safe_dump(_crossing_overrides({"namespaceSelector": {"matchLabels": {"t": "x"}}}))
    )
    from io import StringIO

    out = StringIO()
    assert explain(tmp_path, "research-1", {"t": "x"}, out) == 1
    assert (
        "conflict: gpu-shm.minSize 32Gi (override 'big-shm') is above gpu-shm.maxSize 16Gi "
        "(override 'small-shm') for namespace research-1; maxSize holds" in out.getvalue()
    )


def _snapshot_with(tmp_path: Path, namespaces: dict[str, Any]) -> Path:
    doc = yaml.safe_load(SNAPSHOT.read_text())
    doc["namespaces"].update(namespaces)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_overrides_crossing_only_where_labels_meet_are_found_with_the_cluster(
    tmp_path: Path,
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "r.yaml").write_text(
        yaml.safe_dump(
            _crossing_overrides({"namespaceSelector": {"matchLabels": {"shm": "small"}}}),
            sort_keys=False,
        )
    )
    # No namespace is named, so the loader cannot see them meet: accepted.
    assert run("check", str(rules)).returncode == 0
    cluster = _snapshot_with(tmp_path, {"research-7": {"labels": {"shm": "small"}}})
    result = run("check", str(rules), "--cluster-snapshot", str(cluster))
    assert result.returncode == 1, result.stdout
    assert (
        f"{rules}/r.yaml:17:16: overrides.1.rules.gpu-shm.maxSize: gpu-shm.minSize 32Gi "
        "(override 'big-shm') is above gpu-shm.maxSize 16Gi (override 'small-shm') for "
        "namespace research-7" in result.stdout
    )


def test_overrides_crossing_in_priority_never_break_a_review_where_they_meet() -> None:
    """Where the loader could not see two overrides meet, the review still stands: the
    default outside the allowed list is not injected and the pod is told what is allowed."""
    rules = RuleSet.model_validate(
        {
            "overrides": [
                {
                    "name": "default",
                    "namespaces": ["team-*"],
                    "rules": {"gpu-priority-class": {"defaultClass": "gpu-batch"}},
                },
                {
                    "name": "serving",
                    "namespaceSelector": {"matchLabels": {"tier": "serving"}},
                    "rules": {"gpu-priority-class": {"allowedClasses": ["gpu-serving"]}},
                },
            ]
        }
    )
    request = Request(
        operation="CREATE", namespace="team-a", obj=gpu_pod(), namespace_labels={"tier": "serving"}
    )
    outcome = admit(request, compile_rules(rules), load_snapshot(SNAPSHOT))
    assert isinstance(outcome, Decided)
    assert not outcome.decision.patch or all(
        "priorityClassName" not in op.get("path", "") for op in outcome.decision.patch
    )
    assert [f.rule for f in outcome.decision.denials] == ["gpu-priority-class"]
    assert "names no priorityClassName" in outcome.decision.denials[0].summary


def test_a_hot_reload_refuses_a_contradiction_and_keeps_the_rules_in_service(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.yaml").write_text(
        _budgets({"name": "ml", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 16}})
    )
    holder = RuleHolder(tmp_path)
    assert holder.refresh()
    serving = holder.current
    (tmp_path / "r.yaml").write_text(
        _budgets(
            {"name": "ml", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 16}},
            {"name": "ml2", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 2}},
        )
    )
    assert not holder.refresh()
    assert holder.current is serving


def test_check_refuses_a_test_case_naming_a_rule_that_does_not_exist(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text("mode: enforce\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "cases.yaml").write_text(
        "cases:\n"
        "  - name: over budget\n"
        "    object: {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: []}}\n"
        "    expect:\n"
        "      allowed: false\n"
        "      denied: [gpu-quotas]\n"
    )
    result = run("check", str(tmp_path))
    assert result.returncode == 1
    assert (
        f"{tmp_path}/tests/cases.yaml:6:16: cases.0.expect.denied.0: 'gpu-quotas' is not a rule "
        "id. Fix: did you mean gpu-quota? The rule ids are: gpu-requests-limits," in result.stdout
    )
    assert "ok:" not in result.stdout
    tested = run("test", str(tmp_path))
    assert tested.returncode == 2
    assert "ERROR " + f"{tmp_path}/tests/cases.yaml:6:16: cases.0.expect.denied.0" in tested.stdout


def test_check_with_the_cluster_names_allowed_and_default_classes_it_lacks(
    tmp_path: Path,
) -> None:
    (tmp_path / "r.yaml").write_text(
        "rules:\n"
        "  gpu-priority-class:\n"
        "    defaultClass: gpu-nightly\n"
        "    allowedClasses: [gpu-serving, gpu-nightly]\n"
        "overrides:\n"
        "  - name: research\n"
        "    namespaces: [research]\n"
        "    rules:\n"
        "      gpu-priority-class: {allowedClasses: [gpu-training, gpu-nightly, gpu-weekly]}\n"
    )
    assert run("check", str(tmp_path)).returncode == 0  # without the cluster nothing says so
    result = run("check", str(tmp_path), "--cluster-snapshot", str(SNAPSHOT))
    assert result.returncode == 1
    have = "the cluster has: gpu-batch, gpu-serving, gpu-training"
    lines = [line for line in result.stdout.splitlines() if "does not exist" in line]
    assert lines == [
        f"{tmp_path}/r.yaml:3:19: rules.gpu-priority-class.defaultClass: PriorityClass "
        "'gpu-nightly' does not exist in the cluster: it is never injected, so GPU pods that "
        "name no class get none (and are denied where allowedClasses is set). Fix: create "
        "PriorityClass gpu-nightly (kubectl create "
        f"priorityclass gpu-nightly --value=N), or name a class that exists ({have})",
        f"{tmp_path}/r.yaml:4:35: rules.gpu-priority-class.allowedClasses.1: PriorityClass "
        "'gpu-nightly' does not exist in the cluster: GPU pods that name it are denied for "
        "naming a class that does not exist. Fix: create PriorityClass gpu-nightly (kubectl "
        f"create priorityclass gpu-nightly --value=N), or name a class that exists ({have})",
        f"{tmp_path}/r.yaml:9:59: overrides.0.rules.gpu-priority-class.allowedClasses.1: "
        "PriorityClass 'gpu-nightly' does not exist in the cluster: GPU pods that name it are "
        "denied for naming a class that does not exist. Fix: create PriorityClass gpu-nightly "
        f"(kubectl create priorityclass gpu-nightly --value=N), or name a class that exists "
        f"({have})",
        f"{tmp_path}/r.yaml:9:72: overrides.0.rules.gpu-priority-class.allowedClasses.2: "
        "PriorityClass 'gpu-weekly' does not exist in the cluster: GPU pods that name it are "
        "denied for naming a class that does not exist. Fix: create PriorityClass gpu-weekly "
        f"(kubectl create priorityclass gpu-weekly --value=N), or name a class that exists "
        f"({have})",
    ]


def test_budgets_the_cluster_quotas_make_moot_are_still_said_with_the_cluster(
    tmp_path: Path,
) -> None:
    """The snapshot's ml-team quota (16) is below this budget (20): the quota holds."""
    (tmp_path / "r.yaml").write_text(
        _budgets({"name": "ml", "namespaces": ["ml-team"], "limits": {"nvidia.com/gpu": 20}})
    )
    result = run("check", str(tmp_path), "--cluster-snapshot", str(SNAPSHOT))
    assert result.returncode == 0, result.stdout
    assert (
        "warning: budget 'ml' allows requests.nvidia.com/gpu=20 in ml-team, ResourceQuota "
        "gpu-quota allows 16: the ResourceQuota's 16 is what holds" in result.stdout
    )


def test_the_shipped_rules_and_examples_hold_together() -> None:
    assert load_rules_with_sources(ROOT / "rules").rules is not None
    result = run("check", "rules", "--cluster-snapshot", str(SNAPSHOT))
    assert result.returncode == 0, result.stdout
