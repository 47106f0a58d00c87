"""`gpu-admission audit`: same verdicts as the webhook, formats real parsers accept, no crashes."""

from __future__ import annotations

import io
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.audit import run_audit
from tests.support.paths import CORPUS, ROOT
from tests.support.webhook import Webhook
from webhook.audit.drafiles import from_documents
from webhook.audit.manifests import Document, read_sources
from webhook.audit.reports import write_report
from webhook.audit.run import FAIL_ON, Summary, audit
from webhook.engine.compiled import compile_rules
from webhook.ruleset.files import load_rules

GOLDEN = Path(__file__).parent / "golden"
MANIFESTS = CORPUS / "manifests"


@pytest.fixture(scope="module")
def corpus_audit() -> dict[str, Any]:
    if not MANIFESTS.is_dir():
        pytest.skip("../shared/corpus/manifests is absent")
    result = run_audit(str(MANIFESTS), "-o", "json")
    assert result.returncode in (1, 2), result.stderr  # the corpus has denials and bad files
    return dict(json.loads(result.stdout))


def _document(source: str) -> Any:
    file, _, index = source.partition("#")
    return list(yaml.safe_load_all(Path(file).read_text()))[int(index)]


def test_the_audit_and_the_webhook_agree_on_every_corpus_object(
    corpus_audit: dict[str, Any], webhook: Webhook
) -> None:
    assert corpus_audit["summary"]["objects"] > 50
    # A file holding DRA objects (a claim template beside its Deployment) is judged with them
    # as facts (`audit.drafiles`, tests/audit/test_audit_dra.py); this webhook has no facts at all.
    docs = read_sources([str(MANIFESTS)])
    with_dra = {d.file for d in docs if isinstance(d, Document) and from_documents([d.obj], "")}
    assert len(with_dra) < 10, with_dra
    compared = 0
    for result in corpus_audit["results"]:
        if result["source"].partition("#")[0] in with_dra:
            continue
        compared += 1
        doc = _document(result["source"])
        namespace = result["namespace"]
        mutation = webhook.mutate(doc, namespace=namespace)
        assert mutation.patch == result["patch"], result["source"]
        verdict = webhook.validate(mutation.apply(doc), namespace=namespace)
        assert verdict.allowed is result["allowed"], result["source"]
        denied = {f["rule"] for f in result["findings"] if f["verdict"] == "deny"}
        warned = {f["rule"] for f in result["findings"] if f["verdict"] == "warn"}
        assert verdict.denied_rules == denied, result["source"]
        assert verdict.warned_rules == warned, result["source"]
    assert compared > 50


def test_broken_corpus_files_are_reported_with_their_line(corpus_audit: dict[str, Any]) -> None:
    errors = {e["source"].split("/")[-1]: e["message"] for e in corpus_audit["errors"]}
    assert len(errors) == 3
    assert all("not valid YAML at line " in m for m in errors.values())


@pytest.mark.parametrize("fmt,golden", [("json", "expected.json"), ("junit", "expected.junit.xml")])
def test_golden_outputs(fmt: str, golden: str) -> None:
    result = run_audit("input.yaml", "-o", fmt, cwd=GOLDEN)
    assert result.returncode == 1  # the Deployment asks for half a GPU
    assert result.stdout == (GOLDEN / golden).read_text()


def test_golden_policyreport() -> None:
    rules = compile_rules(load_rules(ROOT / "rules"))
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(GOLDEN)
    try:
        write_report(
            audit(read_sources(["input.yaml"]), rules),
            fmt="policyreport",
            out=out,
            active=rules.base.active_rules,
            unchecked=rules.base.cluster_rules,
            now=0,
        )
    finally:
        os.chdir(cwd)
    assert out.getvalue() == (GOLDEN / "expected.policyreport.yaml").read_text()


def test_json_output_has_the_documented_shape() -> None:
    doc = json.loads(run_audit("input.yaml", "-o", "json", cwd=GOLDEN).stdout)
    assert set(doc) == {"summary", "results", "errors", "notChecked"}
    assert doc["notChecked"] == ["gpu-quota", "gpu-priority-class", "gpu-schedulable"]
    assert doc["summary"] == {
        "objects": 3,
        "allowed": 2,
        "denied": 1,
        "warned": 1,
        "mutated": 2,
        "skipped": 1,
        "errors": 0,
    }
    lines = (GOLDEN / "input.yaml").read_text().splitlines()
    for result in doc["results"]:
        assert set(result) == {
            "source",
            "location",
            "kind",
            "namespace",
            "name",
            "allowed",
            "findings",
            "patch",
        }
        assert set(result["location"]) == {"file", "line", "column"}
        assert result["location"]["file"] == "input.yaml"
        for finding in result["findings"]:
            assert set(finding) == {"rule", "mode", "verdict", "path", "message", "location"}
            assert finding["verdict"] in ("deny", "warn", "audit")
            # Each finding points into its own object: at or after where the object starts.
            assert finding["location"]["line"] >= result["location"]["line"]
            assert finding["location"]["line"] <= len(lines)


def test_junit_output_parses_and_counts_match() -> None:
    root = ET.fromstring(run_audit("input.yaml", "-o", "junit", cwd=GOLDEN).stdout)
    assert root.tag == "testsuites"
    cases = root.findall("./testsuite/testcase")
    assert int(root.get("tests", "0")) == len(cases) == 3  # the workloads; no ConfigMap
    assert int(root.get("failures", "0")) == len(root.findall(".//failure")) == 1
    assert int(root.get("skipped", "0")) == len(root.findall(".//skipped")) == 0
    assert {c.get("file") for c in cases} == {"input.yaml"}
    assert all(int(c.get("line", "0")) > 0 for c in cases)


def test_skipped_kinds_are_counted_always_and_listed_only_with_verbose() -> None:
    plain = run_audit("input.yaml", "-o", "json", cwd=GOLDEN)
    verbose = run_audit("input.yaml", "-o", "json", "--verbose", cwd=GOLDEN)
    assert json.loads(plain.stdout)["summary"]["skipped"] == 1
    assert "skipped" not in json.loads(plain.stdout)
    doc = json.loads(verbose.stdout)
    assert doc["summary"]["skipped"] == 1
    (skipped,) = doc["skipped"]
    assert skipped["kind"] == "ConfigMap" and skipped["source"] == "input.yaml#2"
    text = (GOLDEN / "input.yaml").read_text().splitlines()
    assert text[skipped["location"]["line"] - 1].startswith("apiVersion: v1")
    assert "kind: ConfigMap" in text[skipped["location"]["line"]]
    table = run_audit("input.yaml", cwd=GOLDEN).stdout
    assert "ConfigMap" not in table and "1 skipped" in table
    assert "SKIP  ConfigMap" in run_audit("input.yaml", "-v", cwd=GOLDEN).stdout
    root = ET.fromstring(run_audit("input.yaml", "-o", "junit", "-v", cwd=GOLDEN).stdout)
    assert root.get("tests") == "4" and root.get("skipped") == "1"
    (case,) = [c for c in root.iter("testcase") if c.find("skipped") is not None]
    assert "ConfigMap" in case.get("name", "")


# wgpolicyk8s.io/v1alpha2 PolicyReport, transcribed from the API types of the
# kubernetes-sigs/wg-policy-prototypes project (policyreport_types.go).
_OBJECT_REF = {
    "type": "object",
    "properties": {
        k: {"type": "string"}
        for k in ("apiVersion", "kind", "name", "namespace", "uid", "fieldPath", "resourceVersion")
    },
    "additionalProperties": False,
}
POLICY_REPORT_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "wgpolicyk8s.io/v1alpha2"},
        "kind": {"const": "PolicyReport"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "scope": _OBJECT_REF,
        "scopeSelector": {"type": "object"},
        "summary": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                k: {"type": "integer", "minimum": 0}
                for k in ("pass", "fail", "warn", "error", "skip")
            },
        },
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["policy"],
                "additionalProperties": False,
                "properties": {
                    "source": {"type": "string"},
                    "policy": {"type": "string"},
                    "rule": {"type": "string"},
                    "category": {"type": "string"},
                    "severity": {"enum": ["critical", "high", "low", "medium", "info"]},
                    "timestamp": {
                        "type": "object",
                        "required": ["seconds", "nanos"],
                        "properties": {
                            "seconds": {"type": "integer"},
                            "nanos": {"type": "integer"},
                        },
                        "additionalProperties": False,
                    },
                    "result": {"enum": ["pass", "fail", "warn", "error", "skip"]},
                    "scored": {"type": "boolean"},
                    "resources": {"type": "array", "items": _OBJECT_REF},
                    "resourceSelector": {"type": "object"},
                    "message": {"type": "string"},
                    "properties": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        },
    },
}


# The cluster-scoped twin: no namespace, no scope.
CLUSTER_POLICY_REPORT_SCHEMA = {
    **POLICY_REPORT_SCHEMA,
    "properties": {
        **POLICY_REPORT_SCHEMA["properties"],  # type: ignore[dict-item]
        "kind": {"const": "ClusterPolicyReport"},
        "metadata": {"type": "object", "required": ["name"], "not": {"required": ["namespace"]}},
    },
}


def test_policyreports_validate_against_the_report_schema(corpus_audit: dict[str, Any]) -> None:
    result = run_audit(str(MANIFESTS), "-o", "policyreport")
    reports = [r for r in yaml.safe_load_all(result.stdout) if r]
    assert reports
    namespaced = [r for r in reports if r["kind"] == "PolicyReport"]
    for report in reports:
        schema = POLICY_REPORT_SCHEMA if report in namespaced else CLUSTER_POLICY_REPORT_SCHEMA
        jsonschema.validate(report, schema)
        counts = {k: 0 for k in report["summary"]}
        for r in report["results"]:
            counts[r["result"]] += 1
        assert counts == report["summary"]
    assert sum(r["summary"]["fail"] for r in reports) >= corpus_audit["summary"]["denied"]
    # The object counts ride along as annotations, by the convention of every other output.
    totals = {k: 0 for k in ("objects", "allowed", "denied", "warned", "mutated")}
    for report in namespaced:
        for key in totals:
            totals[key] += int(report["metadata"]["annotations"][f"gpu-admission.io/{key}"])
    assert totals == {k: corpus_audit["summary"][k] for k in totals}
    # The corpus's broken files: error results of the one cluster-scoped report, with lines.
    (errors,) = [r for r in reports if r["kind"] == "ClusterPolicyReport"]
    assert errors["summary"]["error"] == len(corpus_audit["errors"])
    assert all(int(r["properties"]["line"]) > 0 for r in errors["results"])


def test_exit_codes_gate_ci(tmp_path: Path) -> None:
    ok = tmp_path / "ok.yaml"
    ok.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
        "spec:\n  containers: [{name: a, image: x}]\n"
    )
    warned = ROOT / "tests" / "golden" / "pod-no-memory-limit-no-probes" / "input.yaml"
    denied = ROOT / "tests" / "golden" / "pod-fractional-gpu-denied" / "input.yaml"
    assert run_audit(str(ok)).returncode == 0
    assert run_audit(str(warned)).returncode == 0
    assert run_audit(str(warned), "--fail-on", "warn").returncode == 1
    assert run_audit(str(denied)).returncode == 1
    assert run_audit(str(tmp_path / "missing.yaml")).returncode == 2
    assert run_audit("--output", "xml", str(ok)).returncode == 2  # usage error


def test_stdin_is_read_like_helm_template_output() -> None:
    text = (GOLDEN / "input.yaml").read_text()
    result = run_audit("-", "-o", "json", stdin=text)
    assert result.returncode == 1
    assert json.loads(result.stdout)["summary"]["objects"] == 3


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)
GARBAGE = {
    "binary": bytes(range(256)) * 4,
    "truncated yaml": b"apiVersion: v1\nkind: Pod\nmetadata: {name: p\nspec:\n  containers: [",
    "yaml alias bomb": BOMB.encode(),
}


@pytest.mark.parametrize("content", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_is_reported_not_crashed_on(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content)
    good = GOLDEN / "input.yaml"
    result = run_audit(str(bad), str(good), "-o", "json")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    doc = json.loads(result.stdout)
    assert doc["errors"] and doc["errors"][0]["source"].startswith(str(bad))
    assert doc["summary"]["objects"] == 3  # the good file after it was still audited


def test_an_empty_file_is_fine(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("")
    result = run_audit(str(tmp_path / "empty.yaml"), "-o", "json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["summary"]["objects"] == 0


def test_a_10_mb_file_is_audited(tmp_path: Path) -> None:
    pod = (ROOT / "tests" / "golden" / "pod-no-memory-limit-no-probes" / "input.yaml").read_text()
    big = tmp_path / "big.yaml"
    padding = "# " + "x" * 2000 + "\n"
    count = 0
    with big.open("w") as fh:
        while fh.tell() < 10 * 1024 * 1024:
            fh.write(pod + padding + "---\n")
            count += 1
    result = run_audit(str(big), "-o", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["summary"]["objects"] == count


def test_colour_only_on_a_terminal_and_never_with_no_color() -> None:
    import io

    from webhook.audit.cli import use_colour

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert use_colour("table", Terminal(), False, {})
    assert not use_colour("table", Terminal(), False, {"NO_COLOR": "1"})
    assert use_colour("table", Terminal(), False, {"NO_COLOR": ""})  # empty: not set
    assert not use_colour("table", Terminal(), True, {})
    assert not use_colour("table", io.StringIO(), False, {})
    assert not use_colour("json", Terminal(), False, {})


WARNED = ROOT / "tests" / "golden" / "pod-no-memory-limit-no-probes" / "input.yaml"
DENIED = ROOT / "tests" / "golden" / "pod-fractional-gpu-denied" / "input.yaml"
PLAIN = (
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a, image: x}]\n"
)
INPUTS = {
    "nothing wrong": ("ok",),
    "warned only": (str(WARNED),),
    "denied only": (str(DENIED),),
    "warned and denied": (str(WARNED), str(DENIED), "ok"),
    "the golden mix": (str(GOLDEN / "input.yaml"),),
    "a broken file too": (str(WARNED), "broken"),
}


@pytest.mark.parametrize("fail_on", FAIL_ON)
@pytest.mark.parametrize("inputs", INPUTS.values(), ids=INPUTS.keys())
def test_junit_agrees_with_the_exit_code_for_every_fail_on(
    tmp_path: Path, fail_on: str, inputs: tuple[str, ...]
) -> None:
    (tmp_path / "ok").write_text(PLAIN)
    (tmp_path / "broken").write_text(PLAIN + "  - : [\n")
    paths = [str(tmp_path / p) if p in ("ok", "broken") else p for p in inputs]
    junit = run_audit(*paths, "-o", "junit", "--fail-on", fail_on)
    root = ET.fromstring(junit.stdout)
    failures, errors = int(root.get("failures", "0")), int(root.get("errors", "0"))
    assert failures == len(root.findall(".//failure"))
    assert (errors > 0) == ("broken" in inputs)
    assert junit.returncode == (2 if errors else 1 if failures else 0), junit.stdout
    # The failing cases are exactly the objects the JSON output says fail under fail_on.
    doc = json.loads(run_audit(*paths, "-o", "json", "--fail-on", fail_on).stdout)
    verdicts = ("deny", "warn") if fail_on == "warn" else ("deny",)
    failing = [
        r
        for r in doc["results"]
        if not r["allowed"] or any(f["verdict"] in verdicts for f in r["findings"])
    ]
    assert failures == len(failing)
    assert errors == len(doc["errors"]) == doc["summary"]["errors"]
    s = doc["summary"]
    assert failures == (s["denied"] if fail_on == "deny" else len(failing))
    for case in root.iter("testcase"):
        failure = case.find("failure")
        if failure is not None:
            assert failure.get("type") in verdicts


def test_the_table_shows_patches_for_one_object_or_when_asked(tmp_path: Path) -> None:
    many = run_audit("input.yaml", cwd=GOLDEN)
    assert "  patch:" not in many.stdout  # several objects: short by default
    assert "would be mutated" in many.stdout  # the counts still say it
    assert "  patch:" in run_audit("input.yaml", "--show-patch", cwd=GOLDEN).stdout
    pod = ROOT / "tests" / "golden" / "pod-no-memory-limit-no-probes" / "input.yaml"
    assert "  patch:" in run_audit(str(pod)).stdout  # one object: shown


def test_only_failed_lists_denied_and_warned_objects_but_counts_all() -> None:
    full = json.loads(run_audit("input.yaml", "-o", "json", cwd=GOLDEN).stdout)
    short = json.loads(run_audit("input.yaml", "-o", "json", "--only-failed", cwd=GOLDEN).stdout)
    assert short["summary"] == full["summary"]
    failing = [
        r
        for r in full["results"]
        if not r["allowed"] or any(f["verdict"] == "warn" for f in r["findings"])
    ]
    assert short["results"] == failing and len(failing) < len(full["results"])
    table = run_audit("input.yaml", "--only-failed", cwd=GOLDEN).stdout
    assert "OK " not in table and "DENY" in table


def test_summary_counts_per_rule_and_namespace_without_a_line_per_object() -> None:
    full = json.loads(
        run_audit(str(MANIFESTS if MANIFESTS.is_dir() else GOLDEN), "-o", "json").stdout
    )
    short = json.loads(
        run_audit(
            str(MANIFESTS if MANIFESTS.is_dir() else GOLDEN), "-o", "json", "--summary"
        ).stdout
    )
    assert "results" not in short
    assert short["summary"] == full["summary"] and short["errors"] == full["errors"]
    by_rule: dict[str, dict[str, int]] = {}
    for result in full["results"]:
        fired = set()
        for f in result["findings"]:
            tally = by_rule.setdefault(f["rule"], {"objects": 0, "deny": 0, "warn": 0, "audit": 0})
            tally[f["verdict"]] += 1
            if f["rule"] not in fired:
                fired.add(f["rule"])
                tally["objects"] += 1
    assert short["byRule"] == by_rule
    by_namespace = short["byNamespace"]
    assert {r["namespace"] for r in full["results"]} == set(by_namespace)
    for key in ("objects", "allowed", "denied", "warned", "mutated"):
        assert sum(ns[key] for ns in by_namespace.values()) == full["summary"][key]
    for ns, counts in by_namespace.items():
        mine = [r for r in full["results"] if r["namespace"] == ns]
        assert counts["objects"] == len(mine) == counts["allowed"] + counts["denied"]
        assert counts["denied"] == sum(not r["allowed"] for r in mine)


def test_the_summary_table_has_no_object_lines() -> None:
    table = run_audit("input.yaml", "--summary", cwd=GOLDEN).stdout
    assert "DENY" not in table and "Deployment/half" not in table
    rows = {
        line.split()[0]: line.split()[1:] for line in table.splitlines() if line.startswith("  ")
    }
    assert rows["gpu-whole-quantity"] == ["1", "1", "0", "0"]  # objects, deny, warn, audit
    assert rows["ml-team"] == ["2", "1", "1", "1", "2"]  # objects, allowed, denied, warned, mutated
    assert "3 objects: 2 allowed + 1 denied; of these 1 warned, 2 would be mutated" in table


def test_the_summary_line_says_object_for_one() -> None:
    one = Summary(objects=1, allowed=1)
    assert one.describe().startswith("1 object: 1 allowed + 0 denied")
    assert Summary(objects=2, allowed=2).describe().startswith("2 objects: ")


def test_the_table_says_error_for_one(tmp_path: Path) -> None:
    pod = (ROOT / "tests" / "golden" / "pod-no-memory-limit-no-probes" / "input.yaml").read_text()
    (tmp_path / "two.yaml").write_text(pod + "---\nkind: Pod\nspec: [1\n")
    result = run_audit(str(tmp_path / "two.yaml"), "--summary")
    assert result.returncode == 2  # an input that cannot be read: the audit is incomplete
    assert "; 0 skipped (not workloads), 1 error\n" in result.stdout


def test_no_progress_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    pod = (ROOT / "tests" / "golden" / "pod-no-memory-limit-no-probes" / "input.yaml").read_text()
    (tmp_path / "many.yaml").write_text((pod + "---\n") * 3000)  # well over a second
    result = run_audit(str(tmp_path / "many.yaml"), "--summary")
    assert result.returncode == 0
    assert result.stderr == ""
