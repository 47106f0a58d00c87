"""`gpu-admission` command line: certs, serve, audit and rules."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path

from webhook.audit.flags import add_audit_parser
from webhook.audit.reviewcli import add_review_parser
from webhook.audit.snapshotcli import add_snapshot_parser
from webhook.certs.cli import add_certs_parser
from webhook.cliexamples import add_examples
from webhook.clioptions import add_rules_option
from webhook.ruleset.files import rules_folder
from webhook.server.cli import add_serve_parser

__all__ = ["main"]


def _labels(text: str | None) -> dict[str, str] | None:
    if text is None:
        return None
    pairs = [p for p in text.split(",") if p]
    if any("=" not in p for p in pairs):
        raise SystemExit(f"gpu-admission: --labels takes k=v,k=v; got {text!r}")
    return dict(p.split("=", 1) for p in pairs)


def _rules(args: argparse.Namespace) -> int:
    from webhook.facts.snapshotfile import SnapshotError, load_snapshot
    from webhook.quantity import Amount
    from webhook.rulecli import commands as rulecli

    if args.rules and args.dir and args.rules != args.dir:
        print(
            f"gpu-admission: rules given twice ({args.dir} and --rules {args.rules}); give one",
            file=sys.stderr,
        )
        return 2
    folder = rules_folder(args.rules or args.dir)
    if args.rules_command == "check":
        if not args.cluster_snapshot:
            return rulecli.check(folder, sys.stdout)
        try:
            snapshot = load_snapshot(args.cluster_snapshot)
        except SnapshotError as exc:
            print(f"gpu-admission: {exc}", file=sys.stderr)
            return 2

        def quotas_in(namespace: str) -> list[tuple[str, Mapping[str, Amount]]]:
            # A scoped quota counts some pods only: it keeps no budget.
            quotas = snapshot.facts_for(namespace).quotas
            return [(q.name, q.hard) for q in quotas if not q.scopes]

        return rulecli.check(folder, sys.stdout, quotas_in, snapshot)
    if args.rules_command == "schema":
        text = json.dumps(rulecli.schema(), indent=2) + "\n"
        if args.out:
            Path(args.out).write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    if args.rules_command == "webhooks":
        dest = Path(args.out) if args.out else None
        return rulecli.webhooks(folder, sys.stdout, sys.stderr, dest)
    if args.rules_command == "test":
        beside = [folder / "tests"] if folder and folder.is_dir() else []
        cases = [Path(c) for c in args.cases] or beside
        if not cases:
            print(
                "gpu-admission: no --cases, and no rules folder with a tests/ folder: nothing "
                "to test",
                file=sys.stderr,
            )
            return 2
        facts = None
        if args.cluster_snapshot:
            try:
                facts = load_snapshot(args.cluster_snapshot)
            except SnapshotError as exc:
                print(f"gpu-admission: {exc}", file=sys.stderr)
                return 2
        return rulecli.test(folder, cases, sys.stdout, facts)
    return rulecli.explain(folder, args.namespace, _labels(args.labels), sys.stdout)


def _export(args: argparse.Namespace) -> int:
    from webhook.export.command import export

    out = Path(args.out) if args.out else None
    folder = rules_folder(args.rules)
    if args.summary and (args.out or args.webhook_only):
        print(
            "gpu-admission: --summary prints to stdout: no --out or --webhook-only", file=sys.stderr
        )
        return 2
    return export(
        folder,
        args.kubernetes,
        out,
        sys.stdout,
        sys.stderr,
        webhook_only=args.webhook_only,
        one_line=args.summary,
    )


def _completion(args: argparse.Namespace) -> int:
    """Print the completion script: shells source it (docs/audits.md, "Shell completion")."""
    from webhook.completion import script

    sys.stdout.write(script(build_parser(), args.shell))
    return 0


def _version() -> str:
    """The installed distribution's version (pyproject.toml), read only when asked for."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpu-admission")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-admission",
        description="Admission webhook that makes GPU workloads right before they schedule.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    add_certs_parser(sub)

    add_serve_parser(sub)
    add_audit_parser(sub)
    add_review_parser(sub)

    rules = sub.add_parser("rules", help="check, test and explain rule files")
    rules_sub = rules.add_subparsers(dest="rules_command", required=True)
    chk = rules_sub.add_parser("check", help="validate a rule folder (exit 1 on any error)")
    add_rules_option(chk, positional=True)
    chk.add_argument(
        "--cluster-snapshot",
        help="also compare the budgets with this cluster's ResourceQuotas and say where they "
        "disagree",
    )
    sch = rules_sub.add_parser("schema", help="print the JSON Schema of rule files")
    sch.add_argument("dir", nargs="?", help=argparse.SUPPRESS)
    sch.add_argument("--rules", help=argparse.SUPPRESS)  # the schema is the same for all
    sch.add_argument("--out", help="write to this file instead of stdout")
    tst = rules_sub.add_parser("test", help="run rule test cases (default: DIR/tests)")
    add_rules_option(tst, positional=True)
    tst.add_argument(
        "--cases",
        action="append",
        default=[],
        help="case file or folder (repeatable; default: the tests/ folder beside the rules)",
    )
    tst.add_argument(
        "--cluster-snapshot",
        help="cluster facts for every case whose file or case names no clusterSnapshot",
    )
    hooks = rules_sub.add_parser(
        "webhooks", help="print the webhook configurations that route this rule set's kinds"
    )
    add_rules_option(hooks, positional=True)
    hooks.add_argument("--out", help="write to this file instead of stdout")
    exp = rules_sub.add_parser("explain", help="effective settings for one namespace")
    add_rules_option(exp, positional=True)
    exp.add_argument("--namespace", required=True, help="the namespace to explain")
    exp.add_argument("--labels", help="namespace labels, k=v,k=v")
    rules.set_defaults(func=_rules)

    expo = sub.add_parser(
        "export", help="native admission policies for the rules that need no webhook"
    )
    add_rules_option(expo)
    expo.add_argument(
        "--kubernetes", default="1.36", metavar="1.N", help="target version (default 1.36)"
    )
    expo.add_argument("--out", metavar="DIR", help="write DIR/policies.yaml instead of stdout")
    expo.add_argument(
        "--webhook-only",
        action="store_true",
        help="the rule file that switches off in the webhook what the policies now do",
    )
    expo.add_argument(
        "--summary",
        action="store_true",
        help="one line per object (kind, name, the rule settings it comes from), not the YAML",
    )
    expo.set_defaults(func=_export)

    add_snapshot_parser(sub)

    comp = sub.add_parser("completion", help="print a shell completion script (bash or zsh)")
    comp.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete in")
    comp.set_defaults(func=_completion)
    return add_examples(parser)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except BrokenPipeError:  # `... | head` closed the pipe: not an error worth a traceback
        return 0
    except Exception:
        # A bug, not a verdict: exit 2 ("could not finish"), never the 1 that CI hooks read
        # as "something would be denied".
        traceback.print_exc()
        print(
            "gpu-admission: internal error (a bug: please report it with the traceback above)",
            file=sys.stderr,
        )
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
