"""Audit output formats: a table for people, JSON for scripts, JUnit for CI, PolicyReports for
the dashboards that already read the wgpolicyk8s.io format."""

from __future__ import annotations

import difflib
import itertools
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import orjson
import yaml

from webhook.audit.manifests import InputError
from webhook.audit.run import AuditResult, Skipped, Summary

__all__ = ["FORMATS", "View", "policy_reports", "write_report"]

Item = AuditResult | Skipped | InputError

_COLOURS = {"deny": "31", "warn": "33", "audit": "36", "ok": "32", "+": "32", "-": "31"}


def _paint(text: str, key: str, colour: bool) -> str:
    return f"\x1b[{_COLOURS[key]}m{text}\x1b[0m" if colour else text


def _title(r: AuditResult) -> str:
    return f"{r.kind}/{r.name or '(unnamed)'} in {r.namespace}"


@dataclass(frozen=True, slots=True)
class View:
    """What the table and JSON show: every object, or only denied and warned ones (the counts
    always cover everything); patch diffs in the table with `show_patch`, or for one object."""

    only_failed: bool = False
    show_patch: bool = False


def patch_diff(r: AuditResult) -> list[str]:
    """The change the webhook would make, as a YAML diff of the object (context 1 line)."""
    if not r.patch:
        return []
    before = yaml.safe_dump(r.original, sort_keys=False).splitlines()
    after = yaml.safe_dump(r.mutated, sort_keys=False).splitlines()
    lines = difflib.unified_diff(before, after, n=1, lineterm="")
    return [line for line in lines if not line.startswith(("---", "+++"))]


def _single(items: Iterable[Item]) -> tuple[bool, Iterator[Item]]:
    """Whether the stream holds one item at most, and the stream itself, read ahead by two."""
    stream = iter(items)
    ahead = list(itertools.islice(stream, 2))
    return len(ahead) < 2, itertools.chain(ahead, stream)


def _table(
    items: Iterable[Item],
    summary: Summary,
    out: TextIO,
    colour: bool,
    unchecked: list[str],
    view: View,
) -> None:
    single, stream = _single(items)
    show_patch = view.show_patch or single
    for item in stream:
        summary.add(item)
        if isinstance(item, InputError):
            print(_paint(f"ERROR {item.source}: {item.message}", "deny", colour), file=out)
            continue
        if isinstance(item, Skipped):
            continue
        if view.only_failed and item.allowed and not item.warned:
            continue
        verdict = "DENY" if not item.allowed else "WARN" if item.warned else "OK"
        key = {"DENY": "deny", "WARN": "warn", "OK": "ok"}[verdict]
        print(f"{_paint(verdict.ljust(5), key, colour)} {_title(item)}  ({item.source})", file=out)
        for f in item.findings():
            print(
                f"  {_paint(f['verdict'].ljust(5), f['verdict'], colour)} {f['message']}", file=out
            )
        diff = patch_diff(item) if show_patch else []
        if diff:
            print("  patch:", file=out)
            for line in diff:
                sign = line[:1]
                print("    " + (_paint(line, sign, colour) if sign in "+-" else line), file=out)
    s = summary
    print(
        f"\n{s.objects} objects: {s.allowed} allowed, {s.denied} denied, {s.warned} warned, "
        f"{s.mutated} would be mutated; {s.skipped} skipped (not workloads), {s.errors} errors",
        file=out,
    )
    if unchecked:
        print(
            f"not checked (no cluster facts; see --cluster-snapshot): {', '.join(unchecked)}",
            file=out,
        )


def _result_json(r: AuditResult) -> dict[str, Any]:
    return {
        "source": r.source,
        "kind": r.kind,
        "namespace": r.namespace,
        "name": r.name,
        "allowed": r.allowed,
        "findings": r.findings(),
        "patch": r.patch,
    }


def _json(
    items: Iterable[Item], summary: Summary, out: TextIO, unchecked: list[str], view: View
) -> None:
    results, errors = [], []
    for item in items:
        summary.add(item)
        if isinstance(item, AuditResult):
            if view.only_failed and item.allowed and not item.warned:
                continue
            results.append(_result_json(item))
        elif isinstance(item, InputError):
            errors.append({"source": item.source, "message": item.message})
    doc = {
        "summary": {
            "objects": summary.objects,
            "allowed": summary.allowed,
            "denied": summary.denied,
            "warned": summary.warned,
            "mutated": summary.mutated,
            "skipped": summary.skipped,
        },
        "results": results,
        "errors": errors,
        "notChecked": unchecked,
    }
    out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2, default=str).decode() + "\n")


def _junit(items: Iterable[Item], summary: Summary, out: TextIO, fail_on: str = "deny") -> None:
    """One testsuite per file, one testcase per object; denials are failures (and warnings,
    with `--fail-on warn`, so the XML agrees with the exit code), input errors are errors,
    and skipped kinds are skipped cases."""
    suites: dict[str, ET.Element] = {}
    for item in items:
        summary.add(item)
        file = item.source.split("#", 1)[0]
        suite = suites.get(file)
        if suite is None:
            suite = suites[file] = ET.Element("testsuite", name=file)
        if isinstance(item, InputError):
            case = ET.SubElement(suite, "testcase", classname=file, name=item.source)
            ET.SubElement(case, "error", message=item.message, type="input")
            continue
        name = f"{item.kind} {item.source}"
        if isinstance(item, Skipped):
            case = ET.SubElement(suite, "testcase", classname=file, name=name)
            ET.SubElement(case, "skipped", message=f"{item.kind} holds no pod template")
            continue
        case = ET.SubElement(
            suite, "testcase", classname=file, name=f"{_title(item)} ({item.source})"
        )
        findings = item.findings()
        failing = ("deny", "warn") if fail_on == "warn" else ("deny",)
        failed = [f for f in findings if f["verdict"] in failing]
        if failed:
            failure = ET.SubElement(
                case, "failure", message=failed[0]["message"][:200], type=failed[0]["verdict"]
            )
            failure.text = "\n".join(
                f["message"] if f["verdict"] == "deny" else f"{f['verdict']}: {f['message']}"
                for f in failed
            )
        others = [f"{f['verdict']}: {f['message']}" for f in findings if f not in failed]
        if others:
            ET.SubElement(case, "system-out").text = "\n".join(others)
    root = ET.Element("testsuites", name="gpu-admission audit")
    for suite in suites.values():
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
        suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
        suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
        root.append(suite)
    for attr in ("tests", "failures", "errors", "skipped"):
        root.set(attr, str(sum(int(s.get(attr, "0")) for s in root)))
    ET.indent(root)
    out.write(ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")


_RESULT = {"enforce": "fail", "audit": "fail", "warn": "warn"}
_SEVERITY = {"enforce": "high", "audit": "medium", "warn": "low"}


def policy_reports(
    items: Iterable[Item],
    summary: Summary,
    active: Iterable[str],
    now: float,
    unchecked: list[str],
) -> list[dict[str, Any]]:
    """wgpolicyk8s.io/v1alpha2 PolicyReports, one per namespace; a result per object and rule.

    Rules that ran and found nothing report `pass`, so dashboards can show compliance; rules
    that could not run (no cluster facts) report `skip`, never a false pass.
    """
    stamp = {"seconds": int(now), "nanos": 0}
    active = list(active)
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        summary.add(item)
        if not isinstance(item, AuditResult):
            continue
        subject = {
            "apiVersion": item.api_version,
            "kind": item.kind,
            "name": item.name,
            "namespace": item.namespace,
        }
        fired = set()
        for f in item.findings():
            fired.add(f["rule"])
            by_ns[item.namespace].append(
                {
                    "source": "gpu-admission",
                    "policy": "gpu-admission",
                    "rule": f["rule"],
                    "category": "GPU workloads",
                    "severity": _SEVERITY[f["mode"]],
                    "timestamp": dict(stamp),
                    "result": _RESULT[f["mode"]],
                    "scored": True,
                    "resources": [dict(subject)],
                    "message": f["message"],
                    "properties": {"mode": f["mode"], "path": f["path"], "source": item.source},
                }
            )
        for rule in active:
            if rule not in fired:
                by_ns[item.namespace].append(
                    {
                        "source": "gpu-admission",
                        "policy": "gpu-admission",
                        "rule": rule,
                        "timestamp": dict(stamp),
                        "result": "skip" if rule in unchecked else "pass",
                        "scored": True,
                        "resources": [dict(subject)],
                    }
                )
    reports = []
    for namespace, results in sorted(by_ns.items()):
        counts = {k: 0 for k in ("pass", "fail", "warn", "error", "skip")}
        for r in results:
            counts[r["result"]] += 1
        reports.append(
            {
                "apiVersion": "wgpolicyk8s.io/v1alpha2",
                "kind": "PolicyReport",
                "metadata": {
                    "name": "gpu-admission",
                    "namespace": namespace,
                    "labels": {"app.kubernetes.io/managed-by": "gpu-admission"},
                },
                "summary": counts,
                "results": results,
            }
        )
    return reports


def _policyreport(
    items: Iterable[Item],
    summary: Summary,
    out: TextIO,
    active: tuple[str, ...],
    now: float,
    unchecked: list[str],
) -> None:
    reports = policy_reports(items, summary, active, now, unchecked)
    out.write(yaml.safe_dump_all(reports, sort_keys=False) if reports else "")


FORMATS = ("table", "json", "junit", "policyreport")


def write_report(
    items: Iterable[Item],
    *,
    fmt: str,
    out: TextIO,
    active: tuple[str, ...],
    unchecked: tuple[str, ...] = (),
    colour: bool = False,
    now: float | None = None,
    fail_on: str = "deny",
    view: View | None = None,
) -> Summary:
    """Write `items` in `fmt` and return the counts (the caller turns them into an exit code).

    `active` are the rules that judged every object (PolicyReports say `pass` for those that
    found nothing); `unchecked` the ones that could not run for want of cluster facts.
    """
    summary = Summary()
    skipped = list(unchecked)
    view = view or View()
    if fmt == "table":
        _table(items, summary, out, colour, skipped, view)
    elif fmt == "json":
        _json(items, summary, out, skipped, view)
    elif fmt == "junit":
        _junit(items, summary, out, fail_on)
    elif fmt == "policyreport":
        now = time.time() if now is None else now
        _policyreport(items, summary, out, active, now, skipped)
    else:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return summary
