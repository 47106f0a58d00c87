"""What the audit will not read, said as an input error naming the file and line: nesting past
the limit (whichever PyYAML is installed) and values PyYAML cannot construct."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.audit import run_audit  # the audit as a user runs it


def _nested_pod(tmp_path: Path, nested: str) -> Path:
    """A pod whose one container's args are `nested`, a flow collection, on line 5."""
    deep = tmp_path / "deep.yaml"
    deep.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        f"  containers: [{{name: a, image: x, args: {nested}}}]\n"
    )
    return deep


def _flow(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deeply_nested_yaml_inside_a_pod_is_audited(tmp_path: Path) -> None:
    # 200 collections in all (the pod's own 4 included): the most the audit reads.
    result = run_audit(str(_nested_pod(tmp_path, _flow(196))), "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["summary"]["objects"] == 1


DEEPER = {
    # One past the limit; one past where PyYAML 6.0.4's libyaml refuses on its own; deep enough
    # to crash 6.0.3's composer. Each gets the audit's own error, whichever PyYAML is installed.
    "201 levels": _flow(197),
    "libyaml 6.0.4 cap": _flow(1_001),
    "libyaml 6.0.3 crash": _flow(100_000),
}


@pytest.mark.parametrize("nested", DEEPER.values(), ids=DEEPER.keys())
def test_nesting_past_the_limit_is_an_input_error_naming_the_line(
    tmp_path: Path, nested: str
) -> None:
    result = run_audit(str(_nested_pod(tmp_path, nested)), "-o", "json")
    assert result.returncode == 2, result.stderr
    (error,) = json.loads(result.stdout)["errors"]
    assert "nested deeper than 200 levels at line 5" in error["message"]


def test_block_sequences_nested_on_one_line_are_refused_too(tmp_path: Path) -> None:
    """`- - - x` nests a sequence per dash with no new line or bracket."""
    deep = tmp_path / "compact.yaml"
    deep.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
        "  - name: a\n    image: x\n    args:\n    " + "- " * 30_000 + "x\n"
    )
    result = run_audit(str(deep), "-o", "json")
    assert result.returncode == 2, result.stderr
    (error,) = json.loads(result.stdout)["errors"]
    assert "nested deeper than 200 levels at line 9" in error["message"]


@pytest.mark.parametrize("output", ["json", "table", "policyreport", "sarif", "junit", "html"])
def test_a_pod_at_the_depth_limit_is_reported_in_every_output(tmp_path: Path, output: str) -> None:
    result = run_audit(str(_nested_pod(tmp_path, _flow(196))), "-o", output)
    assert result.returncode == 0, result.stderr


def test_an_integer_too_long_to_read_is_an_input_error(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nx: " + "9" * 5000 + "\n")
    result = run_audit(str(huge), "-o", "json")
    assert result.returncode == 2, result.stderr
    (error,) = json.loads(result.stdout)["errors"]
    assert "an integer of thousands of digits" in error["message"]
