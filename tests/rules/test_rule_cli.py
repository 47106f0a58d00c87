"""The rule-editing commands, run the way a platform engineer runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.paths import ROOT
from webhook.rulecli import commands
from webhook.rulecli.commands import conflicts, schema
from webhook.ruleset.models import RuleSet


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "rules", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def test_the_shipped_schema_is_in_sync_with_the_models() -> None:
    shipped = json.loads((ROOT / "schema" / "rules.schema.json").read_text())
    assert shipped == schema(), "run: gpu-admission rules schema --out schema/rules.schema.json"


def test_every_setting_spelled_out_validates_against_the_exported_schema() -> None:
    """The round trip editors rely on: models -> JSON Schema -> the YAML people write."""
    shipped = json.loads((ROOT / "schema" / "rules.schema.json").read_text())
    spelled_out = RuleSet().model_dump(by_alias=True, mode="json", exclude_none=True)
    jsonschema.validate(yaml.safe_load(yaml.safe_dump(spelled_out)), shipped)
    assert RuleSet.model_validate(spelled_out) == RuleSet()
    with pytest.raises(jsonschema.ValidationError) as refused:
        jsonschema.validate({"rules": {"gpu-shm": {"maxSise": "4Gi"}}}, shipped)
    assert refused.value.validator == "additionalProperties"
    assert list(refused.value.absolute_path) == ["rules", "gpu-shm"]


def test_the_shipped_rules_pass_check() -> None:
    result = run("check", "rules")
    assert result.returncode == 0, result.stdout
    assert "valid rule set" in result.stdout


def test_the_shipped_rule_tests_pass() -> None:
    result = run("test", "rules")
    assert result.returncode == 0, result.stdout
    assert " 0 failed" in result.stdout
    assert result.stdout.count("PASS") >= 10


def test_a_team_rule_file_beside_the_shipped_one_keeps_the_shipped_cases_green(
    tmp_path: Path,
) -> None:
    """The shipped cases describe the built-in defaults (`ruleSet: built-in`); cases of a file
    without that line run against the folder, the team's changes included."""
    folder = tmp_path / "rules"
    (folder / "tests").mkdir(parents=True)
    (folder / "gpu-admission.yaml").write_text((ROOT / "rules" / "gpu-admission.yaml").read_text())
    shipped = (ROOT / "rules" / "tests" / "defaults.yaml").read_text()
    (folder / "tests" / "defaults.yaml").write_text(shipped)
    # Hygiene findings the shipped cases expect as warnings, switched off by the team.
    (folder / "team.yaml").write_text("rules:\n  gpu-readiness-probe: {mode: 'off'}\n")
    result = run("test", str(folder))
    assert result.returncode == 0, result.stdout
    assert f"{folder}/tests/defaults.yaml: against the built-in defaults" in result.stdout
    (folder / "team.yaml").write_text(
        "rules:\n  gpu-readiness-probe: {mode: 'off'}\n"
        "overrides:\n  - {name: lab, namespaces: [lab], rules: {gpu-shm: {mutate: false}}}\n"
    )
    assert "(global mode enforce, 1 override)" in run("check", str(folder)).stdout
    # The same cases, said to assume the folder's rules, see the team's change.
    (folder / "tests" / "defaults.yaml").write_text(shipped.replace("ruleSet: built-in\n", ""))
    result = run("test", str(folder))
    assert result.returncode == 1
    assert "FAIL hygiene findings warn and do not deny" in result.stdout
    assert "warned: expected ['gpu-init-container', 'gpu-memory-limit', 'gpu-readiness-probe']" in (
        result.stdout
    )


def test_check_says_what_a_pod_label_exemption_relaxes(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        "exemptions:\n  podSelector: {matchLabels: {app: dcgm-exporter}}\n"
    )
    result = run("check", str(tmp_path))
    assert result.returncode == 0, result.stdout
    assert "podSelector relaxes only the rules about the pod's own shape and hygiene" in (
        result.stdout
    )
    assert "GPU access, budgets, ResourceQuotas, priority and schedulability are judged" in (
        result.stdout
    )
    assert "valid rule set" in result.stdout
    assert "podSelector" not in run("check", "rules").stdout  # said only when it is used


def test_a_broken_folder_fails_check_with_file_line_and_field(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text("rules:\n  gpu-shm:\n    maxSise: 4Gi\n")
    result = run("check", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout.startswith(
        f"{tmp_path}/r.yaml:3:5: rules.gpu-shm.maxSise: unknown key. Fix: did you mean maxSize?"
    )


def test_equally_specific_overrides_setting_one_value_twice_fail_check(tmp_path: Path) -> None:
    (tmp_path / "r.yaml").write_text(
        yaml.safe_dump(
            {
                "overrides": [
                    {"name": "a", "namespaces": ["ml"], "rules": {"gpu-shm": {"maxSize": "8Gi"}}},
                    {"name": "b", "namespaces": ["ml"], "rules": {"gpu-shm": {"maxSize": "4Gi"}}},
                ]
            }
        )
    )
    result = run("check", str(tmp_path))
    assert result.returncode == 1
    assert "overrides 'a' and 'b' both set gpu-shm.maxSize for ml" in result.stdout


def test_a_failing_case_prints_fail_with_a_diff(tmp_path: Path) -> None:
    case = {
        "cases": [
            {
                "name": "expects the wrong shm size",
                "object": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "p"},
                    "spec": {
                        "containers": [
                            {
                                "name": "a",
                                "image": "x",
                                "resources": {"limits": {"nvidia.com/gpu": 1}},
                            }
                        ]
                    },
                },
                "expect": {"allowed": False, "object": {"kind": "Pod"}},
            }
        ]
    }
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(case))
    result = run("test", "rules", "--cases", str(tmp_path / "case.yaml"))
    assert result.returncode == 1
    assert "FAIL expects the wrong shm size" in result.stdout
    assert "allowed: expected False, got True" in result.stdout
    assert "    +      sizeLimit: 8Gi\n" in result.stdout  # the diff shows what came out
    assert "0 passed, 1 failed" in result.stdout


def test_explain_shows_where_each_setting_comes_from(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("rules:\n  gpu-shm:\n    maxSize: 32Gi\n")
    (tmp_path / "team.yaml").write_text(
        yaml.safe_dump(
            {
                "overrides": [
                    {
                        "name": "research",
                        "namespaceSelector": {"matchLabels": {"team": "research"}},
                        "rules": {"gpu-shm": {"maxSize": "64Gi"}},
                    }
                ]
            }
        )
    )
    research = run("explain", str(tmp_path), "--namespace", "r1", "--labels", "team=research")
    assert research.returncode == 0, research.stdout
    assert "maxSize: \"64Gi\"    # override 'research'" in research.stdout
    assert 'minSize: "1Gi"    # built-in default' in research.stdout

    other = run("explain", str(tmp_path), "--namespace", "web")
    assert f'maxSize: "32Gi"    # {tmp_path}/base.yaml:3:5\n' in other.stdout

    exempt = run("explain", str(tmp_path), "--namespace", "kube-system")
    assert "exempt: nothing in this namespace is changed or judged (a built-in exemption" in (
        exempt.stdout
    )


def test_exemption_lists_add_up_across_files_and_explain_says_which_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-team.yaml").write_text("exemptions:\n  namespaces: [monitoring]\n")
    (tmp_path / "b-team.yaml").write_text(
        "exemptions:\n  namespaces:\n    - ml-infra\n  remove:\n    namespaces: [gpu-admission]\n"
    )
    explained = {
        ns: run("explain", str(tmp_path), "--namespace", ns).stdout
        for ns in ("monitoring", "ml-infra", "gpu-operator", "gpu-admission", "web")
    }
    assert (
        f"(exemptions.namespaces: monitoring at {tmp_path}/a-team.yaml:2:16)"
        in (explained["monitoring"])
    )
    assert (
        f"(exemptions.namespaces: ml-infra at {tmp_path}/b-team.yaml:3:7)" in explained["ml-infra"]
    )
    # the built-in ones stay: the GPU Operator's own pods are not judged for GPU access
    assert (
        "not exempt\npartly exempt: the built-in exemption for NVIDIA GPU Operator relaxes "
        in (explained["gpu-operator"])
    )
    assert (
        f"not exempt (exemptions.remove.namespaces at {tmp_path}/b-team.yaml:5:18 takes its "
        "built-in exemption away)" in explained["gpu-admission"]
    )
    assert "not exempt" in explained["web"] and "global mode" in explained["web"]


def test_only_a_built_in_exemption_can_be_removed(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("exemptions:\n  remove:\n    namespaces: [monitoring]\n")
    result = run("check", str(tmp_path))
    assert result.returncode != 0
    assert "monitoring: not a built-in exempt namespace; the built-in ones are kube-system" in (
        result.stdout + result.stderr
    )


def _override(name: str, value: str, **select: Any) -> dict[str, Any]:
    return {"name": name, **select, "rules": {"gpu-shm": {"maxSize": value}}}


def test_conflicts_are_found_among_overrides_that_can_meet() -> None:
    team = {"namespaceSelector": {"matchLabels": {"team": "ml", "tier": "gpu"}}}
    same_team = {"namespaceSelector": {"matchLabels": {"tier": "gpu", "team": "ml"}}}
    rules = RuleSet.model_validate(
        {
            "overrides": [
                _override("a", "8Gi", namespaces=["ml", "ml-dev"]),
                _override("b", "4Gi", namespaces=["ml-dev", "ml"]),
                _override("c", "8Gi", namespaces=["ml-*"]),  # a pattern: another rank
                _override("d", "4Gi", namespaces=["web"]),
                _override("e", "1Gi", **team),
                _override("f", "2Gi", **same_team),
                _override("g", "8Gi", namespaces=["ml"]),  # agrees with a, not with b
            ]
        }
    )
    assert conflicts(rules) == [
        "overrides 'a' and 'b' both set gpu-shm.maxSize for ml, ml-dev with equal precedence; "
        "make one more specific or merge them",
        "overrides 'b' and 'g' both set gpu-shm.maxSize for ml with equal precedence; "
        "make one more specific or merge them",
        "overrides 'e' and 'f' both set gpu-shm.maxSize for namespaces with labels "
        "team=ml, tier=gpu with equal precedence; make one more specific or merge them",
    ]


def test_conflict_detection_is_linear_in_the_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """`rules check` on 12k overrides took minutes comparing every pair; now each override
    is compared within the few groups it can conflict in, against at most two values."""
    compared: list[int] = []
    real = commands._same

    def counting(a: object, b: object) -> bool:
        compared.append(1)
        return real(a, b)

    monkeypatch.setattr(commands, "_same", counting)
    for count in (500, 4000):
        overrides = [_override(f"own-{i}", "8Gi", namespaces=[f"team-{i}"]) for i in range(count)]
        overrides += [_override(f"shared-{i}", "8Gi", namespaces=["shared"]) for i in range(count)]
        overrides.append(_override("odd", "1Gi", namespaces=["shared"]))
        compared.clear()
        found = conflicts(RuleSet.model_validate({"overrides": overrides}))
        assert len(found) == 1 and "'shared-0' and 'odd'" in found[0]
        assert len(compared) <= 2 * count + 2, (count, len(compared))
