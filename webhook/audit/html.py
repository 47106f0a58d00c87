"""`audit -o html`: one self-contained page a platform lead opens in a browser.

GPU use against quota per namespace and findings per rule as charts, and every object with its
findings and patch in a table that sorts and filters. Nothing is fetched: the page
(`report.html` beside this module) carries its CSS and script inline, and the audit as JSON in a
`<script type="application/json">` that the script renders with text nodes only. Objects come
from manifests anyone writes, so no value ever reaches the page as markup, and a Content
Security Policy allows only the page's own script and style (by hash) and no network at all.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, TextIO

import orjson

from webhook.audit.cluster import NamespaceSummary, summarize
from webhook.audit.diff import patch_diff
from webhook.audit.manifests import InputError
from webhook.audit.run import AuditResult, Skipped, Summary
from webhook.engine.accounting import pod_gpus
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.fields import UnreadableObject
from webhook.engine.podviews import group_of, pod_views
from webhook.facts.model import FactsSource
from webhook.quantity import Amount

__all__ = [
    "GpuBar",
    "embed_json",
    "gpu_bars",
    "object_gpus",
    "report_data",
    "rule_counts",
    "write_html",
]

Item = AuditResult | Skipped | InputError

_VERDICT_ORDER = ("deny", "warn", "audit")


@dataclass(frozen=True, slots=True)
class GpuBar:
    """One namespace's use of one GPU resource: what runs, what the audit adds, the cap."""

    namespace: str
    resource: str
    in_use: Amount  # held by the namespace's running pods (cluster facts); 0 without them
    requested: Amount  # asked by the audited objects, all their replicas at once
    quota: Amount | None  # the tightest ResourceQuota on it; None: no quota, or not known


def object_gpus(r: AuditResult, rules: CompiledRuleSet) -> dict[str, Amount]:
    """GPUs the object's pods hold all at once (each template's pod times its replicas), the
    way ResourceQuota charges them; {} for an object the engine could not read."""
    if r.decision.unreadable is not None:
        return {}
    obj = r.mutated if r.mutated is not None else r.original
    try:
        pods = pod_views(
            obj,
            group=group_of(r.api_version),
            kind=r.kind,
            is_gpu=rules.base.is_gpu,
            table=rules.workloads,
        )
    except UnreadableObject:
        return {}
    total: dict[str, Amount] = defaultdict(int)
    for pod in pods:
        for name, amount in pod_gpus(pod).items():
            total[name] += amount * pod.replicas
    return dict(total)


def _quota_by_resource(quota: Mapping[str, Amount]) -> dict[str, Amount]:
    """`requests.<resource>` and `limits.<resource>` keys, the lower cap for each resource:
    the one a new pod hits first."""
    out: dict[str, Amount] = {}
    for key, hard in quota.items():
        resource = key.partition(".")[2]
        if resource:
            out[resource] = min(hard, out.get(resource, hard))
    return out


def gpu_bars(
    results: Iterable[AuditResult],
    rules: CompiledRuleSet,
    in_use: Mapping[str, NamespaceSummary] | None,
    *,
    add_requests: bool = True,
) -> list[GpuBar]:
    """A bar per namespace and GPU resource that anything uses, asks for or caps.

    `in_use` is `cluster.summarize` of the facts the audit ran with (None: no facts, so
    neither use nor quota is known). `add_requests` stacks the audited objects' GPUs on top:
    right for manifests about to be applied, wrong for a live audit, whose objects are the
    very pods counted in use.
    """
    requested: dict[tuple[str, str], Amount] = defaultdict(int)
    if add_requests:
        for r in results:
            for resource, amount in object_gpus(r, rules).items():
                requested[r.namespace, resource] += amount
    used: dict[tuple[str, str], Amount] = {}
    quota: dict[tuple[str, str], Amount] = {}
    for ns, s in (in_use or {}).items():
        used.update({(ns, k): v for k, v in s.gpus.items()})
        quota.update({(ns, k): v for k, v in _quota_by_resource(s.quota).items()})
    keys = sorted(set(requested) | set(used) | set(quota))
    bars = [
        GpuBar(ns, res, used.get((ns, res), 0), requested[ns, res], quota.get((ns, res)))
        for ns, res in keys
    ]
    return [b for b in bars if b.in_use or b.requested or b.quota is not None]


def _rank(count: dict[str, Any]) -> tuple[Any, ...]:
    """Denials first, then warnings, then audits (as `--summary` orders rules); rules that
    could not run last."""
    return (*(-count[v] for v in _VERDICT_ORDER), not count["checked"], count["rule"])


def rule_counts(
    results: Iterable[AuditResult], active: Iterable[str], unchecked: Iterable[str]
) -> list[dict[str, Any]]:
    """Findings per rule and verdict, with how many objects each touched; every active rule
    is listed (none found is worth seeing). Rules that could not run for want of cluster facts
    say so instead of looking clean."""
    skipped = set(unchecked)
    counts: dict[str, dict[str, Any]] = {}

    def row(rule: str) -> dict[str, Any]:
        return counts.setdefault(
            rule,
            {"rule": rule, "deny": 0, "warn": 0, "audit": 0, "objects": 0, "checked": True},
        )

    for rule in active:
        row(rule)["checked"] = rule not in skipped
    for r in results:
        seen = set()
        for f in r.findings():
            row(f["rule"])[f["verdict"]] += 1
            seen.add(f["rule"])
        for rule in seen:
            counts[rule]["objects"] += 1
    return sorted(counts.values(), key=_rank)


def _number(value: Amount) -> float | int:
    return int(value) if value.denominator == 1 else float(value)


def _verdict(r: AuditResult) -> str:
    return "denied" if not r.allowed else "warned" if r.warned else "allowed"


def _object(r: AuditResult, rules: CompiledRuleSet) -> dict[str, Any]:
    return {
        "source": r.source,
        "line": r.location.line if r.location is not None else None,
        "kind": r.kind,
        "namespace": r.namespace,
        "name": r.name,
        "verdict": _verdict(r),
        "gpus": {k: _number(v) for k, v in sorted(object_gpus(r, rules).items())},
        "findings": r.findings(),
        "patch": r.patch,
        "diff": patch_diff(r),
    }


def _bar(b: GpuBar) -> dict[str, Any]:
    return {
        "namespace": b.namespace,
        "resource": b.resource,
        "inUse": _number(b.in_use),
        "requested": _number(b.requested),
        "quota": None if b.quota is None else _number(b.quota),
    }


def _basis(facts: bool, live: bool) -> str:
    """What the usage chart measures: the caption and legend follow it."""
    if live:
        return "cluster"
    return "snapshot" if facts else "manifests"


def report_data(
    items: Iterable[Item],
    summary: Summary,
    rules: CompiledRuleSet,
    *,
    unchecked: Iterable[str] = (),
    facts: FactsSource | None = None,
    live: bool = False,
) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data; counts `items` into `summary`."""
    results: list[AuditResult] = []
    errors: list[dict[str, Any]] = []
    for item in items:
        summary.add(item)
        if isinstance(item, AuditResult):
            results.append(item)
        elif isinstance(item, InputError):
            line = item.location.line if item.location is not None else None
            errors.append({"source": item.source, "line": line, "message": item.message})
    unchecked = list(unchecked)
    in_use = summarize(results, facts, rules) if facts is not None else None
    bars = gpu_bars(results, rules, in_use, add_requests=not live)
    return {
        "summary": {
            "objects": summary.objects,
            "allowed": summary.allowed,
            "denied": summary.denied,
            "warned": summary.warned,
            "mutated": summary.mutated,
            "skipped": summary.skipped,
            "errors": summary.errors,
        },
        "usage": {"basis": _basis(facts is not None, live), "bars": [_bar(b) for b in bars]},
        "rules": rule_counts(results, rules.base.active_rules, unchecked),
        "objects": [_object(r, rules) for r in results],
        "errors": errors,
        "notChecked": unchecked,
    }


# Inside <script>, only `</script` (any case) and `<!--` can end or derail the element; JSON
# allows every character escaped, so `<`, `>` and `&` never appear raw. U+2028 and U+2029 are
# escaped for older script parsers that took them for line ends.
_UNSAFE = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def embed_json(data: Any) -> str:
    """JSON that is safe as the text of a <script> element, whatever strings it holds."""
    return orjson.dumps(data, default=str).decode().translate(_UNSAFE)


_INLINE = re.compile(r"<(script|style) id=\"app\">(.*?)</\1>", re.DOTALL)


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@functools.cache
def _page() -> str:
    """The template with its Content Security Policy filled in: the hashes of its own script
    and style, so no injected handler or element could run even if escaping ever failed."""
    page = resources.files("webhook.audit").joinpath("report.html").read_text(encoding="utf-8")
    hashes = {tag: _sha256(body) for tag, body in _INLINE.findall(page)}
    policy = (
        "default-src 'none'; "
        f"script-src {hashes['script']}; style-src {hashes['style']}; "
        "img-src 'none'; base-uri 'none'; form-action 'none'"
    )
    return page.replace("__CSP__", policy)


def write_html(
    items: Iterable[Item],
    summary: Summary,
    out: TextIO,
    *,
    rules: CompiledRuleSet,
    unchecked: Iterable[str] = (),
    facts: FactsSource | None = None,
    live: bool = False,
) -> None:
    """Write the report page; counts `items` into `summary` like the other formats (pass a
    fresh one).

    `facts`: the cluster facts the audit ran with (`--cluster-snapshot`, or the live cluster's),
    for GPUs in use and quotas per namespace; None leaves both unknown and the chart shows what
    the audited objects ask for. `live`: the objects are the cluster's own workloads, already
    counted in use, so their requests are not added again. `unchecked`: rules that could not
    run for want of cluster facts.
    """
    data = report_data(items, summary, rules, unchecked=unchecked, facts=facts, live=live)
    out.write(_page().replace("__DATA__", embed_json(data), 1))
