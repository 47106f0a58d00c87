"""The flags of `gpu-admission audit`. Running it is cli.py's `run_audit`, imported only when
the command runs, so the other commands start without the audit's modules."""

from __future__ import annotations

import argparse
from typing import Any

from webhook.clioptions import add_rules_option

__all__ = ["add_audit_parser"]


def _run(args: argparse.Namespace) -> int:
    from webhook.audit.cli import run_audit

    return run_audit(args)


def add_audit_parser(sub: Any) -> None:
    """The `audit` subcommand on `sub` (the parent parser's subparsers)."""
    aud = sub.add_parser(
        "audit",
        help="evaluate manifests as the webhook would (exit 1 when something would be denied)",
    )
    aud.add_argument("paths", nargs="*", help="files or folders (recursive); - reads stdin")
    aud.add_argument(
        "--cluster", action="store_true", help="audit the workloads of a live cluster instead"
    )
    aud.add_argument("--kubeconfig", help="with --cluster: the kubeconfig (default: as kubectl)")
    aud.add_argument(
        "--write-reports",
        action="store_true",
        help="with --cluster: store a PolicyReport per namespace in the cluster",
    )
    add_rules_option(aud)
    aud.add_argument(
        "--output",
        "-o",
        default="table",
        choices=["table", "json", "junit", "policyreport", "sarif", "html"],
        help="table (default), json, junit, policyreport (wgpolicyk8s.io), sarif (SARIF "
        "2.1.0 for code scanning, a result at the line of each finding), or html (one "
        "self-contained page: GPU use against quota, findings per rule, every object)",
    )
    aud.add_argument(
        "--namespace",
        help="files: namespace of objects that name none (default: default); "
        "--cluster: only this namespace",
    )
    aud.add_argument(
        "--fail-on",
        choices=["deny", "warn"],
        default="deny",
        help="exit 1 when something would be denied (default), or also when only warned",
    )
    aud.add_argument(
        "--cluster-snapshot", help="cluster facts for quota, priority and schedulability rules"
    )
    aud.add_argument("--no-colour", action="store_true", help="plain text even on a terminal")
    aud.add_argument(
        "--only-failed",
        action="store_true",
        help="list only denied and warned objects (table, json); the counts still cover all",
    )
    aud.add_argument(
        "--show-patch",
        action="store_true",
        help="show each object's patch as a diff in the table (shown anyway for one object)",
    )
    aud.add_argument(
        "--summary",
        action="store_true",
        help="only counts: findings per rule and objects per namespace, no line per object "
        "(table, json)",
    )
    aud.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also list the documents skipped because their kind holds no pod template",
    )
    aud.set_defaults(func=_run)
