"""`gpu-admission audit`: manifests or a live cluster through the engine, as a CI gate.

Exit 0: nothing would be denied; 1: something would be (or warned, with --fail-on warn);
2: the input, the rules or the cluster could not be read (the audit is incomplete).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TextIO

from webhook.audit.manifests import InputError
from webhook.audit.policyreport import policy_reports
from webhook.audit.progress import Progress, progress_for
from webhook.audit.reports import Page, View, write_report
from webhook.audit.run import AuditResult, Skipped, Summary, audit
from webhook.engine.compiled import CompiledRuleSet, compile_rules
from webhook.facts.model import FactsSource

__all__ = ["run_audit"]


def use_colour(output: str, stream: TextIO, no_colour: bool, env: Mapping[str, str]) -> bool:
    """Colour only for the table on a terminal, and never with --no-colour or a non-empty
    NO_COLOR (https://no-color.org)."""
    return output == "table" and stream.isatty() and not no_colour and not env.get("NO_COLOR")


def _fail(message: str) -> int:
    print(f"gpu-admission: {message}", file=sys.stderr)
    return 2


def _counter(item: AuditResult | Skipped | InputError) -> str:
    """The progress counter an audited item adds to."""
    if isinstance(item, InputError):
        return "errors"
    return "skipped" if isinstance(item, Skipped) else "audited"


def _report(
    items: Iterable[Any],
    args: argparse.Namespace,
    rules: CompiledRuleSet,
    *,
    facts: FactsSource | None,
    progress: Progress,
    live: bool = False,
) -> Summary:
    colour = use_colour(args.output, sys.stdout, args.no_colour, os.environ)
    return write_report(
        progress.track(items, _counter),
        fmt=args.output,
        out=progress.guard(sys.stdout),
        active=rules.base.active_rules,
        unchecked=() if facts is not None else rules.base.cluster_rules,
        colour=colour,
        fail_on=args.fail_on,
        view=View(
            only_failed=args.only_failed,
            show_patch=args.show_patch,
            summary=args.summary,
            verbose=args.verbose,
        ),
        page=Page(rules, facts, live),
    )


def run_audit(args: argparse.Namespace) -> int:
    from webhook.facts.snapshotfile import SnapshotError, load_snapshot

    # An audit allocates millions of short-lived objects (YAML nodes, dicts) and keeps almost
    # none: collecting the young generation less often saves a fifth of the run.
    gc.set_threshold(50_000, 50, 50)
    from webhook.audit.manifests import read_sources
    from webhook.ruleset.files import RuleFileError, load_rules, rules_folder, rules_origin

    try:
        rules = compile_rules(load_rules(rules_folder(args.rules)))
        cluster = load_snapshot(args.cluster_snapshot) if args.cluster_snapshot else None
    except RuleFileError as exc:
        return _fail(f"the rules in {rules_origin(args.rules)} cannot be loaded:\n{exc}")
    except SnapshotError as exc:
        return _fail(f"cluster snapshot: {exc}")
    if args.write_reports and not args.cluster:
        return _fail("--write-reports needs --cluster")
    if args.cluster:
        return _fail("give paths or --cluster, not both") if args.paths else _cluster(args, rules)
    if not args.paths:
        return _fail("audit needs paths (or - for stdin), or --cluster")
    namespace = args.namespace or "default"
    results = audit(
        read_sources(args.paths), rules, namespace=namespace, source=cluster, files=True
    )
    progress = progress_for(sys.stderr)
    summary = _report(results, args, rules, facts=cluster, progress=progress)
    return summary.exit_code(args.fail_on)


def api_reason(exc: BaseException) -> str:
    """One line for a failed cluster read: the apiserver's own message when it sent a Status
    (`deployments.apps is forbidden: User ... cannot list ...`), never the client's dump of
    response headers and body."""
    body = getattr(exc, "body", None)
    status = getattr(exc, "status", None)
    if isinstance(body, str | bytes) and status is not None:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        if isinstance(message, str) and message:
            return f"{status} {getattr(exc, 'reason', '') or ''}: {message}".replace("  ", " ")
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _cluster(args: argparse.Namespace, rules: CompiledRuleSet) -> int:
    """The live audit: facts and workloads from one paged read of the cluster."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=args.kubeconfig, client_configuration=cfg)
        api = client.ApiClient(cfg)
    except Exception as exc:  # any failure to reach the cluster makes the audit incomplete
        return _fail(f"cannot read the cluster: {api_reason(exc)}")
    with api:  # its pooled connections are closed when the audit ends, however it ends
        return _audit_cluster(api, args, rules)


def _audit_cluster(api: Any, args: argparse.Namespace, rules: CompiledRuleSet) -> int:
    """The live audit on an open client: one paged read, the report, the PolicyReports."""
    from webhook.audit.cluster import (
        list_workloads,
        one_shot_facts,
        print_summary,
        summarize,
        write_reports,
    )

    try:
        facts = one_shot_facts(api)
    except Exception as exc:  # any failure to reach the cluster makes the audit incomplete
        return _fail(f"cannot read the cluster: {api_reason(exc)}")
    collected: list[AuditResult] = []

    def keep(items: Iterable[Any]) -> Iterator[Any]:
        for item in items:
            if isinstance(item, AuditResult):
                collected.append(item)
            yield item

    progress = progress_for(sys.stderr)
    try:
        workloads = list_workloads(
            api, namespace=args.namespace, progress=progress, table=rules.workloads
        )
        results = keep(audit(workloads, rules, source=facts))
        summary = _report(results, args, rules, facts=facts, progress=progress, live=True)
    except Exception as exc:
        progress.clear()
        return _fail(f"the cluster read failed part way: {api_reason(exc)}")
    if args.output == "table":
        print_summary(summarize(collected, facts, rules))
    if args.write_reports:
        reports = policy_reports(collected, rules.base.active_rules, time.time(), [])
        try:
            written = write_reports(api, reports)
        except Exception as exc:
            return _fail(f"writing PolicyReports failed: {api_reason(exc)}")
        print(f"wrote {written} PolicyReports (wgpolicyk8s.io/v1alpha2)", file=sys.stderr)
    return summary.exit_code(args.fail_on)
