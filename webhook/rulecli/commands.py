"""`gpu-admission rules ...`: check, schema, test and explain, for people who edit rule files."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, TextIO

from webhook.engine.compiled import compile_rules
from webhook.rulecli.cases import load_cases, run_case
from webhook.ruleset.files import LoadedRules, RuleFileError, load_rules_with_sources
from webhook.ruleset.models import RuleSet
from webhook.ruleset.resolve import resolve
from webhook.selectors import matches_any

__all__ = ["check", "conflicts", "explain", "schema", "test"]


def schema() -> dict[str, Any]:
    """JSON Schema of a rule file, from the pydantic models (the single source of truth)."""
    doc = RuleSet.model_json_schema(by_alias=True)
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "gpu-admission rule file"
    return doc


def _overlap(a: Any, b: Any) -> str | None:
    """Namespaces both overrides visibly select, when they are equally specific."""
    if a.rank != b.rank:
        return None
    common = sorted(set(a.namespaces) & set(b.namespaces))
    if common:
        return ", ".join(common)
    if not a.namespaces and not b.namespaces and a.namespace_selector == b.namespace_selector:
        return f"namespaces with labels {a.namespace_selector.describe()}"
    return None


def conflicts(rules: RuleSet) -> list[str]:
    """Equally specific overrides that select the same namespaces and set one setting twice."""
    found = []
    for a, b in itertools.combinations(rules.overrides, 2):
        where = _overlap(a, b)
        if where is None:
            continue
        for rule_id in sorted(set(a.rules) & set(b.rules)):
            for setting in sorted(set(a.rules[rule_id]) & set(b.rules[rule_id])):
                if a.rules[rule_id][setting] != b.rules[rule_id][setting]:
                    found.append(
                        f"overrides {a.name!r} and {b.name!r} both set {rule_id}.{setting} for "
                        f"{where} with equal precedence; make one more specific or merge them"
                    )
    return found


def _load(folder: Path, out: TextIO) -> LoadedRules | None:
    try:
        return load_rules_with_sources(folder)
    except RuleFileError as exc:
        for problem in exc.problems:
            print(problem, file=out)
        return None


def check(folder: Path, out: TextIO) -> int:
    loaded = _load(folder, out)
    if loaded is None:
        return 1
    ties = conflicts(loaded.rules)
    for tie in ties:
        print(f"{folder}: {tie}", file=out)
    if ties:
        return 1
    rs = loaded.rules
    print(
        f"ok: {folder} is a valid rule set (global mode {rs.mode}, {len(rs.overrides)} overrides)",
        file=out,
    )
    return 0


def test(folder: Path, cases: list[Path], out: TextIO) -> int:
    loaded = _load(folder, out)
    if loaded is None:
        return 1
    files = sorted(p for c in cases for p in (c.rglob("*.yaml") if c.is_dir() else [c]))
    found, problems = load_cases(files)
    for problem in problems:
        print(f"ERROR {problem}", file=out)
    passed = 0
    rules = compile_rules(loaded.rules)
    for source, case in found:
        result = run_case(source, case, rules)
        if result.passed:
            passed += 1
            print(f"PASS {case.name}", file=out)
        else:
            print(f"FAIL {case.name} ({source})", file=out)
            for failure in result.failures:
                print(f"  {failure}", file=out)
    failed = len(found) - passed
    print(f"{passed} passed, {failed} failed", file=out)
    return 0 if failed == 0 and not problems and found else 1


def explain(folder: Path, namespace: str, labels: dict[str, str] | None, out: TextIO) -> int:
    loaded = _load(folder, out)
    if loaded is None:
        return 1
    rs = loaded.rules
    shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) if labels else "unknown"
    print(f"namespace {namespace} (labels: {shown})", file=out)
    if matches_any(namespace, rs.exemptions.namespaces) or (
        labels is not None
        and rs.exemptions.namespace_selector is not None
        and rs.exemptions.namespace_selector.matches(labels)
    ):
        print("exempt: nothing in this namespace is changed or judged", file=out)
        return 0
    resolved = resolve(rs, namespace, labels)
    print(f"global mode: {rs.mode}", file=out)
    effective = resolved.rules.rules.model_dump(by_alias=True, mode="json")
    for rule_id, settings in effective.items():
        print(f"{rule_id}:", file=out)
        for key, value in settings.items():
            if (rule_id, key) in resolved.origin:
                source = f"override {resolved.origin[(rule_id, key)]!r}"
            else:
                source = loaded.lines.get(("rules", rule_id, key), "built-in default")
            print(f"  {key}: {json.dumps(value)}    # {source}", file=out)
    for conflict in resolved.conflicts:
        print(f"conflict: {conflict}", file=out)
    return 1 if resolved.conflicts else 0
