"""`export` output a person can review: every object names the rule settings it comes from,
the CEL carries no constant leftovers of its generation, and `--summary` is one line per
object."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT
from webhook.cli import main
from webhook.export.scope import SOURCE_ANNOTATION

SCHEMA = json.loads((ROOT / "schema" / "rules.schema.json").read_text())

RULE_SETS = {
    "defaults": "",
    "namespace-exemption": 'exemptions:\n  namespaceSelector:\n    matchLabels: {gpu: "off"}\n',
    "account-exemption": "exemptions:\n  serviceAccounts: [kube-system/*]\n",
    "budget": (
        "rules:\n  gpu-quota:\n    budgets:\n"
        "      - {name: ml, namespaces: [ml-team], limits: {nvidia.com/gpu: 8}}\n"
    ),
}
# Constants a generator leaves when a condition it wrote has no case to test.
LEFTOVERS = re.compile(
    r"\b(?:false|true)\s*\?|!\((?:false|true)\)|\b(?:true|false)\s*(?:&&|\|\|)"
    r"|(?:&&|\|\|)\s*(?:true|false)\b|\(\s*(?:true|false)\s*\)\s*(?:&&|\|\||\?)"
)
STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(params=sorted(RULE_SETS))
def rules(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text(RULE_SETS[request.param] or "mode: enforce\n")
    return folder


def _exported(rules: Path) -> list[dict[str, Any]]:
    code, out, err = _run("export", "--rules", str(rules), "--kubernetes", "1.36")
    assert code == 0, err
    return [d for d in yaml.safe_load_all(out) if d]


def _expressions(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [e for k, v in value.items() for e in _expressions(v)] + [
            v for k, v in value.items() if k in ("expression", "messageExpression")
        ]
    if isinstance(value, list):
        return [e for v in value for e in _expressions(v)]
    return []


def _setting_exists(path: str) -> bool:
    """`rules.<id>.<setting>` or `rules.<id>.budgets[<name>]` is a setting of the schema."""
    match = re.fullmatch(r"rules\.([\w-]+)\.(\w+)(?:\[[^\]]+\])?", path)
    if match is None:
        return False
    rule = SCHEMA["$defs"]["RuleSettings"]["properties"].get(match[1])
    if rule is None:
        return False
    settings = SCHEMA["$defs"][rule["$ref"].rsplit("/", 1)[-1]]["properties"]
    return match[2] in settings


def test_every_object_names_the_rule_settings_it_comes_from(rules: Path) -> None:
    objects = _exported(rules)
    assert objects
    for obj in objects:
        source = obj["metadata"].get("annotations", {}).get(SOURCE_ANNOTATION, "")
        assert source, f"{obj['kind']} {obj['metadata']['name']} says not where it comes from"
        for part in source.split(", "):
            setting = part.split("=", 1)[0]
            assert _setting_exists(setting), (obj["metadata"]["name"], part)


def test_the_cel_holds_no_constant_leftovers(rules: Path) -> None:
    for obj in _exported(rules):
        for expression in _expressions(obj.get("spec", {})):
            code = STRING.sub("''", expression)
            found = LEFTOVERS.search(code)
            where = code[max(0, found.start() - 60) :][:160] if found else ""
            assert found is None, (obj["metadata"]["name"], where)


def test_summary_is_one_line_per_object(rules: Path) -> None:
    objects = _exported(rules)
    code, out, _ = _run("export", "--rules", str(rules), "--kubernetes", "1.36", "--summary")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(objects)
    for line, obj in zip(lines, objects, strict=True):
        meta = obj["metadata"]
        name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        assert line == f"{obj['kind']} {name}: {meta['annotations'][SOURCE_ANNOTATION]}"


def test_summary_is_for_reading_not_for_a_file(rules: Path, tmp_path: Path) -> None:
    code, _, err = _run("export", "--rules", str(rules), "--summary", "--out", str(tmp_path))
    assert code == 2 and "--summary prints to stdout" in err
