"""`audit -o sarif`: SARIF 2.1.0, the format code scanning (GitHub, GitLab, Azure DevOps) reads
to annotate a pull request on the line of each finding.

One run; one rule descriptor per rule id with what the rule is for; one result per finding at
the line and column of its field, the file relative to the current directory (where CI
checks the repository out). Input errors and, with --verbose, skipped documents are
notifications of the invocation, which is unsuccessful when any input could not be read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import orjson

from webhook.audit.locations import Location
from webhook.audit.manifests import InputError
from webhook.audit.ruledocs import rule_doc
from webhook.audit.run import AuditResult, Skipped
from webhook.audit.tallies import Tallies

__all__ = ["LEVELS", "SCHEMA_URI", "sarif_log", "write_sarif"]

Item = AuditResult | Skipped | InputError

SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
LEVELS = {"deny": "error", "warn": "warning", "audit": "note"}
ROOT = "%SRCROOT%"


def _version() -> str:
    try:
        return metadata.version("gpu-admission")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0"


class _Artifacts:
    """artifactLocations relative to the current directory; absolute file URIs outside it,
    a description for stdin, which has no name."""

    def __init__(self, cwd: Path) -> None:
        self._cwd = cwd
        self._seen: dict[str, dict[str, Any]] = {}

    def location(self, file: str) -> dict[str, Any]:
        if file not in self._seen:
            self._seen[file] = self._make(file)
        return dict(self._seen[file])

    def _make(self, file: str) -> dict[str, Any]:
        if file == "-":
            return {"description": {"text": "standard input"}}
        path = Path(os.path.normpath(self._cwd / file))
        try:
            relative = path.relative_to(self._cwd)
        except ValueError:
            return {"uri": path.as_uri()}
        return {"uri": quote(relative.as_posix()), "uriBaseId": ROOT}


def _physical(artifacts: _Artifacts, location: Location | dict[str, Any]) -> dict[str, Any]:
    where = location.as_json() if isinstance(location, Location) else location
    return {
        "artifactLocation": artifacts.location(where["file"]),
        "region": {"startLine": where["line"], "startColumn": where["column"]},
    }


def _descriptor(rule: str) -> dict[str, Any]:
    doc = rule_doc(rule)
    return {
        "id": rule,
        "shortDescription": {"text": doc.short},
        "fullDescription": {"text": doc.help},
        "help": {"text": doc.help},
        "properties": {"tags": ["kubernetes", "gpu"]},
    }


def _input_note(item: InputError, artifacts: _Artifacts) -> dict[str, Any]:
    """A file or document that could not be read: an error notification of the run (not a
    result: no rule judged it), placed at the document, else the file, when known."""
    note: dict[str, Any] = {
        "level": "error",
        "message": {"text": f"{item.source}: {item.message}"},
        "descriptor": {"id": "input-error"},
    }
    file = item.source.split("#", 1)[0]
    if item.location is not None:
        note["locations"] = [{"physicalLocation": _physical(artifacts, item.location)}]
    elif file:
        whole = {"artifactLocation": artifacts.location(file)}
        note["locations"] = [{"physicalLocation": whole}]
    return note


def _skipped_note(item: Skipped, artifacts: _Artifacts) -> dict[str, Any]:
    """A document of a kind that holds no pod template (`--verbose` lists them): a note."""
    skipped: dict[str, Any] = {
        "level": "note",
        "message": {"text": f"{item.kind} ({item.source}) holds no pod template"},
        "descriptor": {"id": "skipped-kind"},
    }
    if item.location is not None:
        skipped["locations"] = [{"physicalLocation": _physical(artifacts, item.location)}]
    return skipped


def _results(
    item: AuditResult, artifacts: _Artifacts, rule_index: Callable[[str], int]
) -> list[dict[str, Any]]:
    """One result per finding of a judged object, at the field's line when known, and named
    by the object (kind/namespace/name) for viewers that group by logical location."""
    logical = {
        "name": item.name,
        "fullyQualifiedName": f"{item.kind}/{item.namespace}/{item.name}",
        "kind": "object",
    }
    out = []
    for f in item.findings():
        place: dict[str, Any] = {}
        if f["location"] is not None:
            place["physicalLocation"] = _physical(artifacts, f["location"])
        place["logicalLocations"] = [logical]
        out.append(
            {
                "ruleId": f["rule"],
                "ruleIndex": rule_index(f["rule"]),
                "level": LEVELS[f["verdict"]],
                "message": {"text": f["message"]},
                "locations": [place],
                "properties": {"mode": f["mode"], "path": f["path"], "source": item.source},
            }
        )
    return out


def sarif_log(
    items: Iterable[Item],
    tallies: Tallies,
    *,
    active: Iterable[str],
    unchecked: list[str],
    fail_on: str,
    verbose: bool = False,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """The SARIF log of an audit; `tallies` must be counting `items` (its totals fill in the
    run's properties and exit code once the items are read)."""
    base = Path(os.path.normpath(cwd or Path.cwd()))
    artifacts = _Artifacts(base)
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}

    def rule_index(rule: str) -> int:
        if rule not in index:
            index[rule] = len(rules)
            rules.append(_descriptor(rule))
        return index[rule]

    for rule in active:
        rule_index(rule)
    results: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, InputError):
            notes.append(_input_note(item, artifacts))
        elif isinstance(item, Skipped):
            if verbose:
                notes.append(_skipped_note(item, artifacts))
        else:
            results += _results(item, artifacts, rule_index)
    total = tallies.total
    invocation: dict[str, Any] = {
        "executionSuccessful": total.errors == 0,
        "exitCode": total.exit_code(fail_on),
    }
    if notes:
        invocation["toolExecutionNotifications"] = notes
    driver = {"name": "gpu-admission", "version": _version(), "rules": rules}
    run: dict[str, Any] = {
        "tool": {"driver": driver},
        "invocations": [invocation],
        "originalUriBaseIds": {ROOT: {"uri": base.as_uri().rstrip("/") + "/"}},
        "columnKind": "unicodeCodePoints",
        "results": results,
        "properties": {
            "summary": {**total.counts(), "skipped": total.skipped, "errors": total.errors},
            "notChecked": unchecked,
        },
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def write_sarif(
    items: Iterable[Item],
    tallies: Tallies,
    out: TextIO,
    *,
    active: Iterable[str],
    unchecked: list[str],
    fail_on: str,
    verbose: bool = False,
) -> None:
    log = sarif_log(
        items, tallies, active=active, unchecked=unchecked, fail_on=fail_on, verbose=verbose
    )
    out.write(orjson.dumps(log, option=orjson.OPT_INDENT_2).decode() + "\n")
