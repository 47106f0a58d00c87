"""PolicyReports (wgpolicyk8s.io/v1alpha2), the format the policy dashboards already read: one
report per namespace, a result per object and rule, the object counts as annotations; input
errors in one ClusterPolicyReport."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, TextIO

import yaml

from webhook.audit.locations import Location
from webhook.audit.manifests import InputError
from webhook.audit.run import AuditResult, Skipped, Summary

Item = AuditResult | Skipped | InputError

__all__ = ["policy_reports", "write_policy_reports"]


_RESULT = {"enforce": "fail", "audit": "fail", "warn": "warn"}
_SEVERITY = {"enforce": "high", "audit": "medium", "warn": "low"}
_LABELS = {"app.kubernetes.io/managed-by": "gpu-admission"}


def _place(location: Location | dict[str, Any] | None) -> dict[str, str]:
    """A location as PolicyReport result properties, which hold strings only."""
    if location is None:
        return {}
    where = location.as_json() if isinstance(location, Location) else location
    return {k: str(v) for k, v in where.items()}


def _input_error(item: InputError, stamp: dict[str, int]) -> dict[str, Any]:
    """An `error` result for input that could not be read: it belongs to no namespace."""
    return {
        "source": "gpu-admission",
        "policy": "gpu-admission",
        "rule": "input",
        "timestamp": dict(stamp),
        "result": "error",
        "scored": False,
        "message": item.message,
        "properties": {"source": item.source, **_place(item.location)},
    }


def _results(
    item: AuditResult, active: list[str], unchecked: list[str], stamp: dict[str, int]
) -> list[dict[str, Any]]:
    """One object's results: one per finding, then `pass` for each active rule that found
    nothing (`skip` for one that could not run), so a dashboard shows compliance."""
    subject = {
        "apiVersion": item.api_version,
        "kind": item.kind,
        "name": item.name,
        "namespace": item.namespace,
    }
    out = []
    fired = set()
    for f in item.findings():
        fired.add(f["rule"])
        out.append(
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
                "properties": {
                    "mode": f["mode"],
                    "path": f["path"],
                    "source": item.source,
                    **_place(f["location"]),
                },
            }
        )
    out += [
        {
            "source": "gpu-admission",
            "policy": "gpu-admission",
            "rule": rule,
            "timestamp": dict(stamp),
            "result": "skip" if rule in unchecked else "pass",
            "scored": True,
            "resources": [dict(subject)],
        }
        for rule in active
        if rule not in fired
    ]
    return out


def policy_reports(
    items: Iterable[Item],
    active: Iterable[str],
    now: float,
    unchecked: list[str],
) -> list[dict[str, Any]]:
    """wgpolicyk8s.io/v1alpha2 PolicyReports, one per namespace; a result per object and rule.

    Rules that ran and found nothing report `pass`, so dashboards can show compliance; rules
    that could not run (no cluster facts) report `skip`, never a false pass. The report's
    `summary` counts results (object x rule), as the format says; its annotations carry the
    object counts every other output shows. Input errors, which belong to no namespace, go to
    one ClusterPolicyReport of `error` results.
    """
    stamp = {"seconds": int(now), "nanos": 0}
    active = list(active)
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    counts: dict[str, Summary] = defaultdict(Summary)
    errors: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, InputError):
            errors.append(_input_error(item, stamp))
        elif isinstance(item, AuditResult):
            counts[item.namespace].add(item)
            results = _results(item, active, unchecked, stamp)
            if results:  # a namespace with no result has no report
                by_ns[item.namespace] += results
    reports = [
        _report(
            "PolicyReport",
            {"name": "gpu-admission", "namespace": namespace},
            results,
            {f"gpu-admission.io/{k}": str(v) for k, v in counts[namespace].counts().items()},
        )
        for namespace, results in sorted(by_ns.items())
    ]
    if errors:
        meta = {"name": "gpu-admission-input-errors"}
        reports.append(_report("ClusterPolicyReport", meta, errors, {}))
    return reports


def _report(
    kind: str, meta: dict[str, str], results: list[dict[str, Any]], notes: dict[str, str]
) -> dict[str, Any]:
    summary = {k: 0 for k in ("pass", "fail", "warn", "error", "skip")}
    for r in results:
        summary[r["result"]] += 1
    metadata: dict[str, Any] = {**meta, "labels": dict(_LABELS)}
    if notes:
        metadata["annotations"] = notes
    return {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": kind,
        "metadata": metadata,
        "summary": summary,
        "results": results,
    }


def write_policy_reports(
    items: Iterable[Item],
    out: TextIO,
    active: tuple[str, ...],
    now: float,
    unchecked: list[str],
) -> None:
    reports = policy_reports(items, active, now, unchecked)
    out.write(yaml.safe_dump_all(reports, sort_keys=False) if reports else "")
