"""Findings carry the file, line and column of the field they are about, in every output.

A reviewer jumps from a finding to the line to change: the GPU key a denial names, the
container a warning is about, or the nearest parent when the field is missing.
"""

from __future__ import annotations

import json
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.audit import run_audit  # the audit as a user runs it
from tests.support.paths import ROOT
from webhook.audit.locations import locate, parse_path
from webhook.audit.manifests import Document, InputError, read_sources
from webhook.audit.run import AuditResult, audit
from webhook.engine.compiled import compile_rules
from webhook.engine.fields import dotted
from webhook.ruleset.files import load_rules

RULES = compile_rules(load_rules(ROOT / "rules"))

DEPLOYMENT = """\
# two containers; the second asks for half a GPU and has no memory limit
apiVersion: apps/v1
kind: Deployment
metadata: {name: serve, namespace: ml}
spec:
  selector: {matchLabels: {app: serve}}
  template:
    metadata: {labels: {app: serve}}
    spec:
      containers:
        - name: web
          image: nginx
        - name: model
          image: vllm
          readinessProbe: {tcpSocket: {port: 80}}
          resources:
            limits:
              nvidia.com/gpu: "0.5"
"""


def _line_of(text: str, needle: str, after: int = 0) -> tuple[int, int]:
    """1-based line and column of the first `needle` at or after line `after`."""
    for number, line in enumerate(text.splitlines(), start=1):
        if number >= after and needle in line:
            return number, line.index(needle) + 1
    raise AssertionError(f"{needle!r} not in the text")


def _findings(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["rule"]: f for f in result["findings"]}


def test_a_denied_containers_finding_points_at_its_gpu_key(tmp_path: Path) -> None:
    (tmp_path / "serve.yaml").write_text(DEPLOYMENT)
    result = run_audit("serve.yaml", "-o", "json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    (obj,) = json.loads(result.stdout)["results"]
    found = _findings(obj)
    line, column = _line_of(DEPLOYMENT, "nvidia.com/gpu")
    assert found["gpu-whole-quantity"]["location"] == {
        "file": "serve.yaml",
        "line": line,
        "column": column,
    }
    # A missing field points at its nearest parent: no memory limit -> the model's `limits`.
    model = _line_of(DEPLOYMENT, "- name: model")[0]
    assert (
        found["gpu-memory-limit"]["location"]["line"] == _line_of(DEPLOYMENT, "limits:", model)[0]
    )
    # The object itself starts at its first key, after the comment.
    assert obj["location"] == {"file": "serve.yaml", "line": 2, "column": 1}


def test_the_same_lines_in_the_table_and_junit(tmp_path: Path) -> None:
    (tmp_path / "serve.yaml").write_text(DEPLOYMENT)
    line, column = _line_of(DEPLOYMENT, "nvidia.com/gpu")
    table = run_audit("serve.yaml", cwd=tmp_path).stdout
    assert f"  deny  serve.yaml:{line}:{column}  gpu-whole-quantity:" in table
    root = ET.fromstring(run_audit("serve.yaml", "-o", "junit", cwd=tmp_path).stdout)
    (case,) = root.iter("testcase")
    assert case.get("file") == "serve.yaml" and case.get("line") == "2"
    failure = case.find("failure")
    assert failure is not None and failure.text is not None
    assert failure.text.startswith(f"serve.yaml:{line}:{column}")


def test_policy_report_results_carry_the_line(tmp_path: Path) -> None:
    (tmp_path / "serve.yaml").write_text(DEPLOYMENT)
    out = run_audit("serve.yaml", "-o", "policyreport", cwd=tmp_path).stdout
    (report,) = yaml.safe_load_all(out)
    (denial,) = [r for r in report["results"] if r["rule"] == "gpu-whole-quantity"]
    line, column = _line_of(DEPLOYMENT, "nvidia.com/gpu")
    assert denial["properties"]["file"] == "serve.yaml"
    assert (denial["properties"]["line"], denial["properties"]["column"]) == (
        str(line),
        str(column),
    )


def test_json_input_has_lines_too(tmp_path: Path) -> None:
    obj = yaml.safe_load(DEPLOYMENT)
    text = json.dumps(obj, indent=2)
    (tmp_path / "serve.json").write_text(text)
    (result,) = json.loads(run_audit("serve.json", "-o", "json", cwd=tmp_path).stdout)["results"]
    line, column = _line_of(text, '"nvidia.com/gpu"')
    assert _findings(result)["gpu-whole-quantity"]["location"]["line"] == line
    assert _findings(result)["gpu-whole-quantity"]["location"]["column"] == column


def test_stdin_has_lines_of_the_stream() -> None:
    stream = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n" + DEPLOYMENT
    result = run_audit("-", "-o", "json", stdin=stream)
    (obj,) = json.loads(result.stdout)["results"]
    line, _ = _line_of(stream, "nvidia.com/gpu")
    location = _findings(obj)["gpu-whole-quantity"]["location"]
    assert location["file"] == "-" and location["line"] == line


def test_list_items_and_later_documents_count_lines_from_the_file_start(tmp_path: Path) -> None:
    items = [yaml.safe_load(DEPLOYMENT) for _ in range(2)]  # two objects: no YAML alias
    listed = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
    text = listed + "---\n" + DEPLOYMENT
    (tmp_path / "many.yaml").write_text(text)
    docs = [d for d in read_sources([str(tmp_path / "many.yaml")]) if isinstance(d, Document)]
    results = [r for r in audit(docs, RULES) if isinstance(r, AuditResult)]
    assert [r.source.split("#")[1] for r in results] == ["0.items[0]", "0.items[1]", "1"]
    gpu_lines = [n for n, line in enumerate(text.splitlines(), 1) if "nvidia.com/gpu" in line]
    located = [
        f["location"]["line"]
        for r in results
        for f in r.findings()
        if f["rule"] == "gpu-whole-quantity"
    ]
    assert located == gpu_lines and len(set(located)) == 3


def test_a_field_of_an_impossible_type_is_pointed_at() -> None:
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
    pod += "    - name: a\n      image: x\n      resources: [1]\n"
    (obj,) = json.loads(run_audit("-", "-o", "json", stdin=pod).stdout)["results"]
    (finding,) = obj["findings"]
    assert finding["rule"] == "unreadable-object" and not obj["allowed"]
    assert finding["location"] == {"file": "-", "line": 8, "column": 7}


def test_objects_from_a_cluster_have_no_location() -> None:
    obj = yaml.safe_load(DEPLOYMENT)
    (result,) = audit([Document("Deployment/ml/serve", obj)], RULES)
    assert isinstance(result, AuditResult)
    assert result.location is None
    assert result.findings() and all(f["location"] is None for f in result.findings())


BROKEN = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {a: [b}\n"


def test_a_document_that_is_not_yaml_is_an_input_error_with_its_line_in_every_format(
    tmp_path: Path,
) -> None:
    (tmp_path / "bad.yaml").write_text(BROKEN)
    line = 5  # where the parser gives up: the `}` that closes no mapping
    outputs = {
        fmt: run_audit("bad.yaml", "-o", fmt, cwd=tmp_path)
        for fmt in ("table", "json", "junit", "policyreport", "sarif")
    }
    assert {fmt: r.returncode for fmt, r in outputs.items()} == dict.fromkeys(outputs, 2)
    assert f"not valid YAML at line {line}" in outputs["table"].stdout
    (error,) = json.loads(outputs["json"].stdout)["errors"]
    assert error["location"]["file"] == "bad.yaml" and error["location"]["line"] == line
    (case,) = ET.fromstring(outputs["junit"].stdout).iter("testcase")
    assert case.find("error") is not None and case.get("line") == str(line)
    (report,) = yaml.safe_load_all(outputs["policyreport"].stdout)
    assert report["kind"] == "ClusterPolicyReport"
    assert report["results"][0]["properties"]["line"] == str(line)
    (invocation,) = json.loads(outputs["sarif"].stdout)["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["locations"][0]["physicalLocation"]["region"]["startLine"] == line


# --- properties --------------------------------------------------------------------------------

_KEY = st.from_regex(r"[a-z][a-zA-Z0-9_./-]{0,10}", fullmatch=True)
_SEGMENT = st.one_of(st.integers(min_value=0, max_value=999), _KEY)


@given(st.lists(_SEGMENT, max_size=8))
def test_a_field_path_reads_back_into_its_segments(segments: list[str | int]) -> None:
    assert parse_path(dotted("", *segments)) == segments


@given(st.text(max_size=40))
def test_any_path_is_read_without_failing(path: str) -> None:
    node = yaml.compose("a: {b: [1, 2]}")
    assert node is not None
    where = locate(node, path, "f.yaml")
    assert 1 <= where.line <= 1 and where.column >= 1


_SCALAR = st.one_of(st.integers(-5, 5), st.text("abc xyz", max_size=6), st.booleans(), st.none())
_TREE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3),
        st.dictionaries(_KEY.filter(lambda k: k != "kind"), inner, min_size=1, max_size=4),
    ),
    max_leaves=20,
)
_OBJECT = st.dictionaries(_KEY.filter(lambda k: k != "kind"), _TREE, min_size=1, max_size=4)


def _key_paths(node: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every path that ends at a mapping key."""
    out: list[tuple[str | int, ...]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append((*prefix, key))
            out.extend(_key_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_key_paths(value, (*prefix, i)))
    return out


_DUMPS = {
    "block yaml": lambda o: yaml.safe_dump(o, sort_keys=False),
    "flow yaml": lambda o: yaml.safe_dump(o, sort_keys=False, default_flow_style=True),
    "json": lambda o: json.dumps(o, indent=2),
    "compact json": lambda o: json.dumps(o),
}


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_OBJECT, style=st.sampled_from(sorted(_DUMPS)), data=st.data())
def test_every_key_of_any_document_is_found_at_its_own_line_and_column(
    obj: dict[str, Any], style: str, data: st.DataObject
) -> None:
    text = _DUMPS[style](obj)
    path = data.draw(st.sampled_from(_key_paths(obj)))
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "doc.yaml"
        file.write_text("# leading comment\n" + text)
        (doc,) = read_sources([str(file)])
    assert isinstance(doc, Document)
    where = doc.locate(dotted("", *path))
    assert where is not None and where.file == str(file)
    line = ("# leading comment\n" + text).splitlines()[where.line - 1]
    key = str(path[-1])
    assert line[where.column - 1 :].startswith((key, f'"{key}"', f"'{key}'")), (line, key)


@settings(max_examples=200)
@given(st.text(alphabet="ab: -[]{}\n\"'&*!#,?|>", max_size=60))
def test_any_text_is_read_or_reported_with_a_line_inside_it(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "x.yaml"
        file.write_text(text)
        items = list(read_sources([str(file)]))
    lines = max(1, text.count("\n") + 1)
    for item in items:
        if isinstance(item, InputError) and item.location is not None:
            assert 1 <= item.location.line <= lines, (text, item)


@pytest.mark.parametrize("path", ["", "spec", "spec.nope.deeper", "spec.containers[7]"])
def test_a_path_past_the_document_falls_back_to_what_exists(path: str) -> None:
    node = yaml.compose("apiVersion: v1\nspec:\n  containers:\n    - name: a\n")
    assert node is not None
    where = locate(node, path, "f.yaml")
    expected = {"": 1, "spec": 2, "spec.nope.deeper": 2, "spec.containers[7]": 3}[path]
    assert where.line == expected
