"""`rules test` with cluster facts: a case, its file or the command line names a snapshot; a
case whose rule needs facts it was not given is not checked, never failed as "nothing denied
it"; what needs no facts (the allowed priority classes) is judged without them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.paths import ROOT
from webhook.rulecli.cases import load_cases

SNAPSHOT = ROOT / "examples" / "cluster-snapshot.yaml"
RULES = (
    "rules:\n"
    "  gpu-priority-class:\n"
    "    allowedClasses: [gpu-training, gpu-serving, gpu-nightly]\n"
    "  gpu-quota:\n"
    "    budgets:\n"
    "      - {name: ml-team, namespaces: [ml-team], limits: {nvidia.com/gpu: 14}}\n"
)


def pod(gpus: int, priority_class: str = "gpu-training") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train"},
        "spec": {
            "priorityClassName": priority_class,
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "8Gi"}},
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }


def case(name: str, obj: dict[str, Any], expect: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"name": name, "namespace": "ml-team", "object": obj, **more, "expect": expect}


OVER_BUDGET = case(
    "four more GPUs go over the budget",
    pod(4),
    {"allowed": False, "denied": ["gpu-quota"]},
)


def folder(tmp_path: Path, *cases: dict[str, Any], **top: Any) -> Path:
    (tmp_path / "r.yaml").write_text(RULES)
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "cases.yaml").write_text(
        yaml.safe_dump({**top, "cases": list(cases)}, sort_keys=False)
    )
    return tmp_path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "rules", "test", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_a_case_needing_facts_it_was_not_given_is_not_checked_not_failed(tmp_path: Path) -> None:
    result = run(str(folder(tmp_path, OVER_BUDGET)))
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines() == [
        f"SKIP four more GPUs go over the budget ({tmp_path}/tests/cases.yaml): not checked "
        "(no cluster facts)",
        "  gpu-quota cannot judge this case without cluster facts (what it expects needs them)",
        "  give the case or its file a clusterSnapshot, or run with --cluster-snapshot",
        "0 passed, 0 failed, 1 not checked (no cluster facts)",
    ]
    assert "nothing denied it" not in result.stdout


def test_a_case_naming_a_snapshot_file_beside_it_is_judged_with_those_facts(
    tmp_path: Path,
) -> None:
    # The example cluster: ml-team runs 12 GPUs; 12 + 4 is over the budget of 14.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "cluster.yaml").write_text(SNAPSHOT.read_text())
    fits = case("two more GPUs fit", pod(2), {"allowed": True}, clusterSnapshot="cluster.yaml")
    over = {**OVER_BUDGET, "clusterSnapshot": "cluster.yaml"}
    result = run(str(folder(tmp_path, over, fits)))
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines() == [
        "PASS four more GPUs go over the budget",
        "PASS two more GPUs fit",
        "2 passed, 0 failed",
    ]


def test_the_command_line_snapshot_judges_every_case_that_names_none(tmp_path: Path) -> None:
    result = run(str(folder(tmp_path, OVER_BUDGET)), "--cluster-snapshot", str(SNAPSHOT))
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines() == [
        "PASS four more GPUs go over the budget",
        "1 passed, 0 failed",
    ]


def test_a_case_s_own_facts_beat_its_file_s_and_those_beat_the_command_line(
    tmp_path: Path,
) -> None:
    """The file says ml-team is empty (so 4 GPUs fit); one case says it runs 12 (so they do
    not); the command line's snapshot (12 running) is never used."""
    training = [{"name": "gpu-training", "value": 1000}]
    empty = {"namespaces": {"ml-team": {"labels": {}}}, "priorityClasses": training}
    busy = {
        **empty,
        "pods": [{"namespace": "ml-team", "name": "big", "gpus": {"nvidia.com/gpu": 12}}],
    }
    fits = case("four fit in an empty namespace", pod(4), {"allowed": True, "denied": []})
    over = {**OVER_BUDGET, "clusterSnapshot": busy}
    result = run(
        str(folder(tmp_path, fits, over, clusterSnapshot=empty)),
        "--cluster-snapshot",
        str(SNAPSHOT),
    )
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines() == [
        "PASS four fit in an empty namespace",
        "PASS four more GPUs go over the budget",
        "2 passed, 0 failed",
    ]


def test_the_allowed_class_list_is_judged_without_facts(tmp_path: Path) -> None:
    denied = case(
        "a class outside the list is denied",
        pod(1, "gpu-batch"),
        {"allowed": False, "denied": ["gpu-priority-class"]},
    )
    result = run(str(folder(tmp_path, denied)))
    assert result.stdout.splitlines() == [
        "PASS a class outside the list is denied",
        "1 passed, 0 failed",
    ]


def test_a_class_that_exists_nowhere_needs_the_cluster_and_is_not_checked_without_it(
    tmp_path: Path,
) -> None:
    missing = case(
        "an allowed class the cluster lacks is denied",
        pod(1, "gpu-nightly"),
        {"allowed": False, "denied": ["gpu-priority-class"]},
    )
    without = run(str(folder(tmp_path, missing)))
    assert "1 not checked (no cluster facts)" in without.stdout
    with_facts = run(str(tmp_path), "--cluster-snapshot", str(SNAPSHOT))
    assert with_facts.stdout.splitlines()[0] == "PASS an allowed class the cluster lacks is denied"


def test_a_failure_facts_cannot_explain_still_fails_without_them(tmp_path: Path) -> None:
    wrong = case(
        "expects a privileged denial that cannot come",
        pod(1),
        {"allowed": False, "denied": ["privileged-gpu"]},
    )
    result = run(str(folder(tmp_path, wrong)))
    assert result.returncode == 1
    assert result.stdout.splitlines()[0].startswith("FAIL expects a privileged denial")
    assert "0 passed, 1 failed" in result.stdout


def test_a_snapshot_that_cannot_be_read_is_an_input_error_naming_it(tmp_path: Path) -> None:
    gone = {**OVER_BUDGET, "clusterSnapshot": "nowhere.yaml"}
    bad = {**OVER_BUDGET, "name": "bad", "clusterSnapshot": {"nodes": [{"count": "many"}]}}
    result = run(str(folder(tmp_path, gone)))
    assert result.returncode == 2
    assert f"ERROR {tmp_path}/tests/cases.yaml: cases.0.clusterSnapshot: " in result.stdout
    assert "nowhere.yaml" in result.stdout
    result = run(str(folder(tmp_path, bad)))
    assert result.returncode == 2
    assert f"ERROR {tmp_path}/tests/cases.yaml: cases.0.clusterSnapshot: nodes.0." in result.stdout


SNAPSHOT_KEYS = st.sampled_from(
    ["namespaces", "nodes", "pods", "priorityClasses", "resourceQuotas", "secrets", "bogus"]
)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(SNAPSHOT_KEYS, VALUES, max_size=4))
def test_any_inline_facts_load_or_are_named_as_an_error(
    tmp_path_factory: Any, facts: dict[str, Any]
) -> None:
    path = tmp_path_factory.mktemp("c") / "cases.yaml"
    path.write_text(yaml.safe_dump({"clusterSnapshot": facts, "cases": [OVER_BUDGET]}))
    found, problems = load_cases([path])
    if problems:
        assert not found
        assert all(p.startswith(f"{path}: clusterSnapshot: ") for p in problems), problems
    else:
        assert found[0].facts is not None
