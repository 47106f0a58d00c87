"""`gpu-admission rules ...`: check, schema, test and explain, for people who edit rule files."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from webhook.engine.compiled import compile_rules
from webhook.facts.model import FactsSource
from webhook.facts.static import StaticSnapshot
from webhook.namepatterns import matches_any
from webhook.rulecli.cases import load_cases, run_case
from webhook.rulecli.clusterchecks import cluster_problems
from webhook.rulecli.clusternotes import cluster_notes
from webhook.rulecli.exemptnotes import exemption_notes, partial_exemptions
from webhook.rulecli.queuenotes import queue_lines
from webhook.rulecli.webhookyaml import render_webhooks
from webhook.ruleset.components import CLUSTER_NAMESPACES
from webhook.ruleset.files import LoadedRules, RuleFileError, load_rules_with_sources, located
from webhook.ruleset.models import Override, RuleSet
from webhook.ruleset.quotas import QuotasIn, budget_plans, disagreements
from webhook.ruleset.resolve import resolve

__all__ = ["check", "conflicts", "explain", "schema", "test"]


def schema() -> dict[str, Any]:
    """JSON Schema of a rule file, from the pydantic models (the single source of truth)."""
    doc = RuleSet.model_json_schema(by_alias=True)
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "gpu-admission rule file"
    return doc


def _overlap(a: Override, b: Override) -> str:
    """Namespaces both overrides visibly select (they share a bucket, so there are some)."""
    common = sorted(set(a.namespaces) & set(b.namespaces))
    if common:
        return ", ".join(common)
    selector = a.namespace_selector
    return f"namespaces with labels {selector.describe() if selector else 'any'}"


def _buckets(overrides: Sequence[Override]) -> dict[tuple[object, ...], list[int]]:
    """Overrides that can conflict, grouped: equal rank, and a namespace name (or, with no
    names, the same selector) in common. Each override lands in one bucket per name, so the
    grouping is linear in the rule set's size."""
    buckets: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for i, o in enumerate(overrides):
        if o.namespaces:
            for name in dict.fromkeys(o.namespaces):
                buckets[(o.rank, "name", name)].append(i)
        else:
            selector = o.namespace_selector
            key = json.dumps(selector.model_dump(), sort_keys=True) if selector else ""
            buckets[(o.rank, "selector", key)].append(i)
    return buckets


def _same(a: object, b: object) -> bool:
    """One comparison of two settings' values (a seam: tests count the calls)."""
    return a == b


def conflicts(rules: RuleSet) -> list[str]:
    """Equally specific overrides that select the same namespaces and set one setting twice.

    Linear: within a bucket each setting remembers the first value set and the first override
    that set a different one, so every override that disagrees is reported against one earlier
    override instead of against all of them.
    """
    overrides = rules.overrides
    found: set[tuple[int, int, str, str]] = set()
    for members in _buckets(overrides).values():
        if len(members) < 2:
            continue
        seen: dict[tuple[str, str], list[tuple[int, object]]] = {}
        for j in members:
            for rule_id, settings in overrides[j].rules.items():
                for setting, value in settings.items():
                    earlier = seen.setdefault((rule_id, setting), [])
                    # At most two remembered values: the first, and the first that differs.
                    other = next((i for i, v in earlier if not _same(v, value)), None)
                    if other is not None:
                        found.add((other, j, rule_id, setting))
                    if len(earlier) < 2 and (not earlier or other is not None):
                        earlier.append((j, value))
    return [
        f"overrides {overrides[i].name!r} and {overrides[j].name!r} both set {rule_id}.{setting} "
        f"for {_overlap(overrides[i], overrides[j])} with equal precedence; make one more "
        "specific or merge them"
        for i, j, rule_id, setting in sorted(found)
    ]


def _load(folder: Path | None, out: TextIO) -> LoadedRules | None:
    try:
        return load_rules_with_sources(folder)
    except RuleFileError as exc:
        for problem in exc.problems:
            print(problem, file=out)
        return None


def check(
    folder: Path | None,
    out: TextIO,
    quotas_in: QuotasIn | None = None,
    cluster: FactsSource | None = None,
) -> int:
    """Validate the rule folder; with the cluster's ResourceQuotas (`quotas_in(namespace)`),
    also say where they and the budgets disagree, and with its facts (`cluster`), what of
    them the rules leave out."""
    loaded = _load(folder, out)
    if loaded is None:
        for problem in _case_problems(folder):  # every problem at once, the cases' too
            print(problem, file=out)
        return 1
    ties = conflicts(loaded.rules)
    for tie in ties:
        print(f"{folder}: {tie}", file=out)
    rs = loaded.rules
    refused = located(cluster_problems(rs, cluster), loaded, folder) if cluster is not None else []
    refused += _case_problems(folder)
    for problem in refused:
        print(problem, file=out)
    if ties or refused:
        return 1
    for line in exemption_notes(rs):
        print(f"note: {folder}: {line}", file=out)
    if rs.workloads:
        kinds = ", ".join(f"{w.kind}.{w.group or 'core'}" for w in rs.workloads)
        print(
            f"note: {folder}: declares workloads {kinds}; regenerate the webhook configurations "
            f"(gpu-admission rules webhooks --rules {folder}) so the apiserver sends them",
            file=out,
        )
    plans = budget_plans(rs)
    for plan in plans:
        for line in plan.describe():
            print(f"note: {line}", file=out)
    for line in disagreements(plans, quotas_in) if quotas_in is not None else ():
        print(f"warning: {line}", file=out)
    for line in cluster_notes(rs, cluster) if cluster is not None else ():
        print(f"warning: {line}", file=out)
    where = folder if folder is not None else "no rules folder: the built-in defaults"
    count = len(rs.overrides)
    print(
        f"ok: {where} is a valid rule set (global mode {rs.mode}, {count} "
        f"{'override' if count == 1 else 'overrides'})",
        file=out,
    )
    return 0


def _case_problems(folder: Path | None) -> list[str]:
    """What is wrong in the folder's own test cases (tests/): a case that names a rule that
    does not exist can only ever fail, so the rule set is not ready either."""
    tests = folder / "tests" if folder is not None else None
    if tests is None or not tests.is_dir():
        return []
    return load_cases(sorted(tests.rglob("*.yaml")))[1]


def webhooks(folder: Path | None, out: TextIO, err: TextIO, dest: Path | None = None) -> int:
    """The webhook configurations routing this rule set's kinds (stdout or `dest`)."""
    loaded = _load(folder, err)
    if loaded is None:
        return 1
    text = render_webhooks(compile_rules(loaded.rules))
    if dest is None:
        out.write(text)
    else:
        dest.write_text(text)
    return 0


def test(
    folder: Path | None, cases: list[Path], out: TextIO, cluster: StaticSnapshot | None = None
) -> int:
    """Run the cases; `cluster` is the facts of every case whose file names none. A case that
    failed for want of facts is said as not checked, and fails nothing."""
    loaded = _load(folder, out)
    if loaded is None:
        return 1
    files = sorted(p for c in cases for p in (c.rglob("*.yaml") if c.is_dir() else [c]))
    found, problems = load_cases(files, cluster)
    for problem in problems:
        print(f"ERROR {problem}", file=out)
    passed = unchecked = 0
    rules = {"folder": compile_rules(loaded.rules)}
    said: set[str] = set()
    for item in found:
        source, case = item.source, item.case
        if item.rule_set == "built-in" and source not in said:
            said.add(source)
            print(f"{source}: against the built-in defaults (ruleSet: built-in)", file=out)
        if item.rule_set not in rules:
            rules[item.rule_set] = compile_rules(RuleSet())
        result = run_case(source, case, rules[item.rule_set], item.facts)
        if result.passed:
            passed += 1
            print(f"PASS {case.name}", file=out)
        elif result.unchecked:
            unchecked += 1
            print(f"SKIP {case.name} ({source}): not checked (no cluster facts)", file=out)
            for failure in result.failures:
                print(f"  {failure}", file=out)
            print(
                "  give the case or its file a clusterSnapshot, or run with --cluster-snapshot",
                file=out,
            )
        else:
            print(f"FAIL {case.name} ({source})", file=out)
            for failure in result.failures:
                print(f"  {failure}", file=out)
    failed = len(found) - passed - unchecked
    skipped = f", {unchecked} not checked (no cluster facts)" if unchecked else ""
    print(f"{passed} passed, {failed} failed{skipped}", file=out)
    if problems:
        return 2  # a case file that could not be read: as the audit says an input error
    return 0 if failed == 0 and found else 1


def exemption_of(
    loaded: LoadedRules, namespace: str, labels: dict[str, str] | None
) -> tuple[bool, str]:
    """Whether a namespace is exempt, and what made it so (or took an exemption away), with
    the file and line that said it: in the engine's order (`CompiledRuleSet.exempt_namespace`:
    the names less those removed, then the namespace selector)."""
    ex = loaded.rules.exemptions
    gone = set(ex.remove.namespaces)
    for i, pattern in enumerate(ex.namespaces):
        if pattern not in gone and matches_any(namespace, [pattern]):
            where = loaded.lines.get(("exemptions", "namespaces", i), "")
            return True, f"exemptions.namespaces: {pattern} at {where}".removesuffix(" at ")
    if namespace in CLUSTER_NAMESPACES and ex.built_in and namespace not in gone:
        return True, "a built-in exemption; exemptions.remove.namespaces takes it away"
    removed = next((i for i, n in enumerate(ex.remove.namespaces) if n == namespace), None)
    selector = ex.namespace_selector
    if labels is not None and selector is not None and selector.matches(labels):
        where = loaded.lines.get(("exemptions", "namespaceSelector"), "")
        return True, f"its labels match exemptions.namespaceSelector at {where}"
    if removed is not None:
        where = loaded.lines.get(("exemptions", "remove", "namespaces", removed), "")
        return False, f"exemptions.remove.namespaces at {where} takes its built-in exemption away"
    return False, ""


def explain(folder: Path | None, namespace: str, labels: dict[str, str] | None, out: TextIO) -> int:
    loaded = _load(folder, out)
    if loaded is None:
        return 1
    rs = loaded.rules
    shown = ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) if labels else "unknown"
    print(f"namespace {namespace} (labels: {shown})", file=out)
    exempt, why = exemption_of(loaded, namespace, labels)
    if exempt:
        print(f"exempt: nothing in this namespace is changed or judged ({why})", file=out)
        return 0
    print(f"not exempt ({why})" if why else "not exempt", file=out)
    for line in partial_exemptions(rs, namespace):
        print(f"partly exempt: {line}", file=out)
    resolved = resolve(rs, namespace, labels)
    print(f"global mode: {rs.mode}", file=out)
    plans = {p.budget: p for p in budget_plans(rs)}
    for budget in rs.rules.gpu_quota.budgets:
        selector = budget.namespace_selector
        if matches_any(namespace, budget.namespaces) or (
            selector is not None and labels is not None and selector.matches(labels)
        ):
            for line in plans[budget.name].describe():
                print(line, file=out)
    for line in queue_lines(resolved.rules.rules.gpu_queue):
        print(line, file=out)
    effective = resolved.rules.rules.model_dump(by_alias=True, mode="json")
    for rule_id, settings in effective.items():
        print(f"{rule_id}:", file=out)
        for key, value in settings.items():
            if (rule_id, key) in resolved.origin:
                source = f"override {resolved.origin[(rule_id, key)]!r}"
            else:
                where = loaded.lines.get(("rules", rule_id, key))
                source = str(where) if where is not None else "built-in default"
            print(f"  {key}: {json.dumps(value)}    # {source}", file=out)
    for conflict in resolved.conflicts:
        print(f"conflict: {conflict}", file=out)
    return 1 if resolved.conflicts else 0
