"""Audit output formats: a table for people, JSON for scripts, JUnit for CI, written here;
PolicyReports (policyreport.py), SARIF (sarif.py) and the HTML page (html.py) are dispatched
from `write_report` too.

Every format counts by one convention (`run.Summary`): each object is allowed or denied, and
warned and mutated count objects among those; a JUnit failure is an object that makes the
exit code 1 under the same `--fail-on`.
"""

from __future__ import annotations

import itertools
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import orjson

from webhook.audit.diff import patch_diff
from webhook.audit.html import write_html
from webhook.audit.locations import Location
from webhook.audit.manifests import InputError
from webhook.audit.policyreport import write_policy_reports
from webhook.audit.run import AuditResult, Skipped, Summary
from webhook.audit.sarif import write_sarif
from webhook.audit.tallies import VERDICTS, Tallies
from webhook.engine.compiled import CompiledRuleSet
from webhook.facts.model import FactsSource

__all__ = ["FORMATS", "Page", "View", "write_report"]

Item = AuditResult | Skipped | InputError

_COLOURS = {"deny": "31", "warn": "33", "audit": "36", "ok": "32", "+": "32", "-": "31"}


def _paint(text: str, key: str, colour: bool) -> str:
    return f"\x1b[{_COLOURS[key]}m{text}\x1b[0m" if colour else text


def _title(r: AuditResult) -> str:
    return f"{r.kind}/{r.name or '(unnamed)'} in {r.namespace}"


@dataclass(frozen=True, slots=True)
class View:
    """What the table and JSON show: every object, or only denied and warned ones (the counts
    always cover everything), or with `summary` only counts per rule and per namespace; patch
    diffs in the table with `show_patch`, or for one object. Skipped kinds are listed (table,
    JSON, JUnit, SARIF) only when `verbose`."""

    only_failed: bool = False
    show_patch: bool = False
    summary: bool = False
    verbose: bool = False


def _where(location: dict[str, Any] | None) -> str:
    """`file:line:col  ` before a located finding; nothing for one from a live cluster."""
    if location is None:
        return ""
    return f"{location['file']}:{location['line']}:{location['column']}  "


def _listed(item: AuditResult, view: View) -> bool:
    return not (view.only_failed and item.allowed and not item.warned)


@dataclass(frozen=True, slots=True)
class Page:
    """What the HTML report draws beside the results: every active rule, and the GPUs in use
    and quotas of the cluster facts the audit ran with (None: unknown)."""

    rules: CompiledRuleSet
    facts: FactsSource | None = None
    live: bool = False  # the objects are the live cluster's: already counted as in use


def _single(items: Iterable[Item]) -> tuple[bool, Iterator[Item]]:
    """Whether the stream holds one item at most, and the stream itself, read ahead by two."""
    stream = iter(items)
    ahead = list(itertools.islice(stream, 2))
    return len(ahead) < 2, itertools.chain(ahead, stream)


def _table(
    items: Iterable[Item],
    tallies: Tallies,
    out: TextIO,
    colour: bool,
    unchecked: list[str],
    view: View,
) -> None:
    single, stream = _single(items)
    show_patch = view.show_patch or single
    for item in stream:
        if isinstance(item, InputError):
            print(_paint(f"ERROR {item.source}: {item.message}", "deny", colour), file=out)
            continue
        if view.summary:
            continue
        if isinstance(item, Skipped):
            if view.verbose:
                line = f", line {item.location.line}" if item.location else ""
                print(f"SKIP  {item.kind}  ({item.source}{line}): holds no pod template", file=out)
            continue
        if not _listed(item, view):
            continue
        verdict = "DENY" if not item.allowed else "WARN" if item.warned else "OK"
        key = {"DENY": "deny", "WARN": "warn", "OK": "ok"}[verdict]
        line = f", line {item.location.line}" if item.location else ""
        print(
            f"{_paint(verdict.ljust(5), key, colour)} {_title(item)}  ({item.source}{line})",
            file=out,
        )
        for f in item.findings():
            mark = _paint(f["verdict"].ljust(5), f["verdict"], colour)
            print(f"  {mark} {_where(f['location'])}{f['message']}", file=out)
        diff = patch_diff(item) if show_patch else []
        if diff:
            print("  patch:", file=out)
            for line in diff:
                sign = line[:1]
                print("    " + (_paint(line, sign, colour) if sign in "+-" else line), file=out)
    if view.summary:
        _table_counts(tallies, out)
    s = tallies.total
    print(
        f"\n{s.describe()}; {s.skipped} skipped (not workloads), "
        f"{s.errors} {'error' if s.errors == 1 else 'errors'}",
        file=out,
    )
    if unchecked:
        print(
            f"not checked (no cluster facts; see --cluster-snapshot): {', '.join(unchecked)}",
            file=out,
        )


def _columns(title: str, heads: tuple[str, ...], rows: list[tuple[str, list[int]]]) -> list[str]:
    """A left column of names and right-aligned numbers under their heads."""
    width = max([len(title), *(len(name) + 2 for name, _ in rows)])
    lines = [title.ljust(width) + "".join(f"  {h}" for h in heads)]
    for name, numbers in rows:
        cells = "".join(f"  {n:>{len(h)}}" for h, n in zip(heads, numbers, strict=True))
        lines.append(f"  {name}".ljust(width) + cells)
    return lines


def _table_counts(tallies: Tallies, out: TextIO) -> None:
    """`--summary`: findings per rule and objects per namespace instead of one line each."""
    rules = [(rule, [t.objects, t.deny, t.warn, t.audit]) for rule, t in tallies.rules()]
    if rules:
        for line in _columns("findings by rule", ("objects", *VERDICTS), rules):
            print(line, file=out)
    else:
        print("no findings", file=out)
    heads = ("objects", "allowed", "denied", "warned", "mutated")
    spaces = [
        (ns or "(cluster-scoped)", list(s.counts().values())) for ns, s in tallies.namespaces()
    ]
    if spaces:
        for line in _columns("objects by namespace", heads, spaces):
            print(line, file=out)


def _location_json(location: Location | None) -> dict[str, Any] | None:
    return location.as_json() if location is not None else None


def _result_json(r: AuditResult) -> dict[str, Any]:
    return {
        "source": r.source,
        "location": _location_json(r.location),
        "kind": r.kind,
        "namespace": r.namespace,
        "name": r.name,
        "allowed": r.allowed,
        "findings": r.findings(),
        "patch": r.patch,
    }


def _json(
    items: Iterable[Item], tallies: Tallies, out: TextIO, unchecked: list[str], view: View
) -> None:
    results, errors, skipped = [], [], []
    for item in items:
        if isinstance(item, AuditResult):
            if not view.summary and _listed(item, view):
                results.append(_result_json(item))
        elif isinstance(item, InputError):
            errors.append(
                {
                    "source": item.source,
                    "location": _location_json(item.location),
                    "message": item.message,
                }
            )
        elif view.verbose and not view.summary:
            skipped.append(
                {
                    "source": item.source,
                    "kind": item.kind,
                    "location": _location_json(item.location),
                }
            )
    s = tallies.total
    doc: dict[str, Any] = {
        "summary": {**s.counts(), "skipped": s.skipped, "errors": s.errors},
    }
    if view.summary:
        doc.update(tallies.as_json())
    else:
        doc["results"] = results
    if view.verbose and not view.summary:
        doc["skipped"] = skipped
    doc["errors"] = errors
    doc["notChecked"] = unchecked
    out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2, default=str).decode() + "\n")


def _suite_of(item: Item) -> str:
    """Manifests group by file; live objects, which have none, by namespace."""
    if isinstance(item, InputError):
        return item.source.split("#", 1)[0]
    if item.location is not None:
        return item.location.file
    if isinstance(item, AuditResult):
        return f"namespace {item.namespace or '(cluster-scoped)'}"
    return item.source.split("#", 1)[0]


def _case(suite: ET.Element, name: str, location: Location | None) -> ET.Element:
    case = ET.SubElement(suite, "testcase", classname=suite.get("name", ""), name=name)
    if location is not None:  # read by GitLab, Jenkins and others to link the file
        case.set("file", location.file)
        case.set("line", str(location.line))
    return case


def _junit(items: Iterable[Item], out: TextIO, fail_on: str, view: View) -> None:
    """One testsuite per file (per namespace for a live cluster), one testcase per object.

    A case fails exactly when its object makes the exit code 1 under `fail_on` (denied; or
    warned, with `--fail-on warn`), so `failures > 0` whenever the exit code is 1. Input
    errors are errors; skipped kinds are skipped cases, listed only with `--verbose`.
    """
    suites: dict[str, ET.Element] = {}

    def suite_for(item: Item) -> ET.Element:
        name = _suite_of(item)
        if name not in suites:
            suites[name] = ET.Element("testsuite", name=name)
        return suites[name]

    for item in items:
        if isinstance(item, InputError):
            case = _case(suite_for(item), item.source, item.location)
            ET.SubElement(case, "error", message=item.message, type="input")
            continue
        if isinstance(item, Skipped):
            if view.verbose:
                case = _case(suite_for(item), f"{item.kind} {item.source}", item.location)
                ET.SubElement(case, "skipped", message=f"{item.kind} holds no pod template")
            continue
        case = _case(suite_for(item), f"{_title(item)} ({item.source})", item.location)
        findings = item.findings()
        failing = ("deny", "warn") if fail_on == "warn" else ("deny",)
        failed = [f for f in findings if f["verdict"] in failing] if item.fails(fail_on) else []
        if failed:
            failure = ET.SubElement(
                case, "failure", message=failed[0]["message"][:200], type=failed[0]["verdict"]
            )
            failure.text = "\n".join(
                _where(f["location"])
                + (f["message"] if f["verdict"] == "deny" else f"{f['verdict']}: {f['message']}")
                for f in failed
            )
        others = [
            f"{_where(f['location'])}{f['verdict']}: {f['message']}"
            for f in findings
            if f not in failed
        ]
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


FORMATS = ("table", "json", "junit", "policyreport", "sarif", "html")


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
    tallies: Tallies | None = None,
    page: Page | None = None,
) -> Summary:
    """Write `items` in `fmt` and return the counts (the caller turns them into an exit code).

    `active` are the rules that judged every object (PolicyReports say `pass` for those that
    found nothing); `unchecked` the ones that could not run for want of cluster facts.
    `tallies`, when given, receives the counts (per rule and namespace too, when detailed).
    `page` is what the HTML report needs beyond the results (the rules, the cluster facts).
    """
    view = view or View()
    tallies = tallies if tallies is not None else Tallies(detailed=view.summary)
    counted = tallies.counted(items)
    skipped = list(unchecked)
    if fmt == "table":
        _table(counted, tallies, out, colour, skipped, view)
    elif fmt == "json":
        _json(counted, tallies, out, skipped, view)
    elif fmt == "junit":
        _junit(counted, out, fail_on, view)
    elif fmt == "policyreport":
        now = time.time() if now is None else now
        write_policy_reports(counted, out, active, now, skipped)
    elif fmt == "sarif":
        write_sarif(
            counted,
            tallies,
            out,
            active=active,
            unchecked=skipped,
            fail_on=fail_on,
            verbose=view.verbose,
        )
    elif fmt == "html":
        if page is None:
            raise ValueError("the html format needs the page's rules and facts")
        write_html(
            counted,
            Summary(),
            out,
            rules=page.rules,
            unchecked=skipped,
            facts=page.facts,
            live=page.live,
        )
    else:
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return tallies.total
