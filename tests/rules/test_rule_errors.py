"""Any rule file with one bad value or one unknown key gets exactly one error line, naming the
file, the line and column of what is wrong (the value, or the key when the key is wrong), the
field path and a fix, whatever the file's layout: block or flow style, any indent, keys in any
order, text that is not ASCII before it on the line, and another valid file beside it."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.paths import ROOT
from webhook.ruleset.files import RuleFileError, load_rules
from webhook.ruleset.models import RuleSettings

MODES = ["enforce", "warn", "audit", "off"]
RULES_WITH_MODE = sorted(
    str(f.alias)
    for f in RuleSettings.model_fields.values()
    if "mode" in f.annotation.model_fields  # type: ignore[union-attr]
)
# Mapping places that take only known keys, by what they need to exist in the document.
NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
ODD_TEXT = st.text(
    alphabet="aéüøçßλ中文-", min_size=1, max_size=8
)  # not ASCII: columns count characters


@st.composite
def valid_rules(draw: st.DrawFn) -> dict[str, Any]:
    """A valid rule file: some settings of each part of a rule set."""
    doc: dict[str, Any] = {}
    if draw(st.booleans()):
        doc["mode"] = draw(st.sampled_from(MODES))
    rules: dict[str, Any] = {}
    for rule in draw(st.lists(st.sampled_from(RULES_WITH_MODE), max_size=4, unique=True)):
        rules[rule] = {"mode": draw(st.sampled_from(MODES))}
    if draw(st.booleans()):
        rules["gpu-shm"] = {
            "memoryFraction": draw(st.sampled_from([0.25, 0.5, 1])),
            "mutate": draw(st.booleans()),
            "minSize": "1Gi",
        }
    budgets = [
        {
            "name": f"budget-{i}",
            # Each budget its own namespaces: two over the same ones contradict each other.
            "namespaces": [f"team-{i}", *draw(st.lists(ODD_TEXT | NAMES, max_size=2))],
            "limits": {"nvidia.com/gpu": draw(st.integers(1, 64))},
        }
        for i in range(draw(st.integers(0, 3)))
    ]
    if budgets:
        rules["gpu-quota"] = {"budgets": budgets}
    if rules:
        doc["rules"] = rules
    if draw(st.booleans()):
        doc["cluster"] = {"maxStalenessSeconds": draw(st.integers(1, 3600))}
    if draw(st.booleans()):
        doc["exemptions"] = {
            "namespaces": draw(st.lists(ODD_TEXT | NAMES, max_size=3)),
            "serviceAccounts": [f"{a}/{b}" for a, b in draw(st.lists(st.tuples(NAMES, NAMES)))],
        }
    overrides = [
        {
            "name": f"override-{i}",
            "namespaces": draw(st.lists(ODD_TEXT | NAMES, min_size=1, max_size=2)),
            "rules": {"gpu-shm": {"maxSize": draw(st.sampled_from(["4Gi", "2Gi"]))}},
        }
        for i in range(draw(st.integers(0, 3)))
    ]
    if overrides:
        doc["overrides"] = overrides
    return doc


def _at(doc: dict[str, Any], path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc.setdefault(key, {}) if isinstance(doc, dict) else doc[key]
    return doc


@st.composite
def one_bad_thing(draw: st.DrawFn, doc: dict[str, Any]) -> tuple[tuple[Any, ...], str, bool]:
    """Put one wrong value or one unknown key into `doc`: (its path, the token that marks it in
    the text, whether the key is what is wrong)."""
    token = f"zq{draw(st.integers(1000, 9999))}x"
    number = -draw(st.integers(7_770_001, 7_779_999))
    budgets = doc.get("rules", {}).get("gpu-quota", {}).get("budgets", [])
    overrides = doc.get("overrides", [])
    values: list[tuple[tuple[Any, ...], Any]] = [
        (("mode",), token),
        (("rules", draw(st.sampled_from(RULES_WITH_MODE)), "mode"), token),
        (("rules", "gpu-shm", "memoryFraction"), token),
        (("rules", "gpu-shm", "mutate"), token),
        (("rules", "gpu-shm", "minSize"), token),
        (("rules", "gpu-probe-delays", "readinessMinDelaySeconds"), number),
        (("cluster", "maxStalenessSeconds"), draw(st.sampled_from([token, number]))),
        (("exemptions", "serviceAccounts"), token),  # not namespace/name
    ]
    values += [
        (("rules", "gpu-quota", "budgets", i, "limits", "nvidia.com/gpu"), bad)
        for i in range(len(budgets))
        for bad in (token, number)
    ]
    values += [
        (("overrides", i, "rules", "gpu-shm", "maxSize"), token) for i in range(len(overrides))
    ]
    keys: list[tuple[Any, ...]] = [
        (),
        ("rules",),
        ("rules", "gpu-shm"),
        ("cluster",),
        ("exemptions",),
    ]
    keys += [("rules", "gpu-quota", "budgets", i) for i in range(len(budgets))]
    keys += [("overrides", i) for i in range(len(overrides))]
    keys += [("overrides", i, "rules", "gpu-shm") for i in range(len(overrides))]
    if draw(st.booleans()):
        path, value = draw(st.sampled_from(values))
        if path == ("exemptions", "serviceAccounts"):
            accounts = _at(doc, ("exemptions",)).setdefault("serviceAccounts", [])
            index = draw(st.integers(0, len(accounts)))
            accounts.insert(index, value)
            return (*path, index), str(value), False
        _at(doc, path[:-1])[path[-1]] = value
        return path, str(value), False
    parent = draw(st.sampled_from(keys))
    _at(doc, parent)[token] = 1
    return (*parent, token), token, True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_one_bad_value_or_key_gives_one_line_with_file_line_column_and_fix(
    data: st.DataObject,
) -> None:
    doc = data.draw(valid_rules())
    path, token, on_key = data.draw(one_bad_thing(doc))
    text = yaml.safe_dump(
        doc,
        default_flow_style=data.draw(st.sampled_from([False, True, None])),
        indent=data.draw(st.integers(2, 6)),
        width=data.draw(st.sampled_from([40, 80, 1000])),
        sort_keys=data.draw(st.booleans()),
        allow_unicode=True,
    )
    text = data.draw(st.sampled_from(["", "# team rules\n", "---\n"])) + text
    assert text.count(token) == 1, text
    before = text[: text.index(token)]
    if before.endswith(("'", '"')):  # a quoted value starts at its quote
        before = before[:-1]
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    other = {"gpuResources": data.draw(st.lists(ODD_TEXT | NAMES, min_size=1, max_size=3))}
    bad_name, good_name = data.draw(st.sampled_from([("a.yaml", "b.yaml"), ("b.yaml", "a.yaml")]))
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / bad_name).write_text(text)
        (Path(folder) / good_name).write_text(yaml.safe_dump(other, allow_unicode=True))
        try:
            load_rules(folder)
        except RuleFileError as exc:
            problems = exc.problems
        else:
            raise AssertionError(f"loaded:\n{text}")
    field = ".".join(str(p) for p in path)
    assert len(problems) == 1, (text, problems)
    (problem,) = problems
    where = f"{folder}/{bad_name}:{line}:{column}: {field}: "
    assert problem.startswith(where), (text, problem, where, on_key)
    assert "\n" not in problem
    assert re.search(r"\S\. Fix: \S", problem[len(where) :]), problem


# --- the documented example -----------------------------------------------------------------

EXAMPLE = Path(__file__).parent / "errors"


@pytest.mark.parametrize(
    ("folder", "block"),
    [
        # The usual mistakes, each named at its line and column, in order, with its fix.
        pytest.param(EXAMPLE, 1, id="the-example-rule-file"),
        # Settings each valid that cannot hold together, and a test case naming a rule that
        # does not exist: every one named at once.
        pytest.param(EXAMPLE / "contradictions", 2, id="settings-that-cannot-hold-together"),
    ],
)
def test_rules_check_prints_the_golden_lines_and_the_docs_show_them(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    folder: Path,
    block: int,
) -> None:
    """`rules check` on the rule folder under tests/rules/errors/ names each problem at its
    line and column with its fix: exactly expected.txt, which the writing-rules page shows in
    its `block`-th text block."""
    from webhook.cli import main

    monkeypatch.chdir(folder)
    assert main(["rules", "check", "rules"]) == 1
    printed = capsys.readouterr().out
    expected = (folder / "expected.txt").read_text()
    assert printed == expected
    page = (ROOT / "docs" / "writing-rules.md").read_text()
    shown = page.split("```text\n")[block].split("```", 1)[0]
    assert _shown_lines(shown) == expected.splitlines()


def _shown_lines(shown: str) -> list[str]:
    """The lines of a block on the page, each wrapped line joined back: the page wraps each
    line to fit the site's code width, and a line indented deeper than the block continues the
    one above it."""
    block = [line for line in shown.splitlines() if line.strip()]
    indent = len(block[0]) - len(block[0].lstrip())
    lines: list[str] = []
    for line in block:
        if len(line) - len(line.lstrip()) > indent:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line.strip())
    return lines
