"""`gpu-admission` command line: certs, serve, audit and rules."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webhook.audit.snapshotcli import add_snapshot_parser
from webhook.certs.cli import add_certs_parser
from webhook.cliexamples import add_examples
from webhook.ruleset.files import rules_folder
from webhook.server.cli import add_serve_parser

__all__ = ["main"]

MIB = 1024 * 1024


def _serve(args: argparse.Namespace) -> int:
    from webhook.logs import setup
    from webhook.server.app import serve
    from webhook.server.http.limits import Limits

    setup(args.log_level, args.log_format)
    from webhook.ruleset.files import rules_origin

    logging.getLogger("gpu-admission").info("rules from %s", rules_origin(args.rules))
    limits = Limits(
        max_body=int(args.max_body_mib * MIB),
        body_memory=int(args.body_memory_mib * MIB),
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        idle_timeout=args.idle_timeout,
    )
    try:
        serve(
            host=args.host,
            port=args.port,
            cert=Path(args.cert),
            key=Path(args.key),
            rules_dir=rules_folder(args.rules),
            rules_check_seconds=args.rules_check_seconds,
            cluster_snapshot=Path(args.cluster_snapshot) if args.cluster_snapshot else None,
            kubeconfig=Path(args.kubeconfig) if args.kubeconfig else None,
            client_ca=Path(args.client_ca) if args.client_ca else None,
            cert_check_seconds=args.cert_check_seconds,
            in_cluster=args.in_cluster
            or (not args.no_cluster and "KUBERNETES_SERVICE_HOST" in os.environ),
            probe_port=args.probe_port or None,
            limits=limits,
            drain_seconds=args.drain_seconds,
            hold_seconds=args.hold_seconds,
            hold_settle_seconds=args.hold_settle_seconds,
            release_memory=args.release_memory,
            profile_stages=args.profile_stages,
        )
    except (OSError, ValueError) as exc:
        print(f"gpu-admission: {exc}", file=sys.stderr)
        return 2
    return 0


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


def _review(args: argparse.Namespace) -> int:
    """Print the AdmissionReview the apiserver would send for the one object in a file."""
    import jsonpatch
    import orjson

    from webhook.audit.admissionreview import admission_review
    from webhook.audit.manifests import Document, read_sources
    from webhook.engine.admit import Decided, Request, admit
    from webhook.engine.compiled import compile_rules
    from webhook.engine.pipeline import Stage
    from webhook.facts.snapshotfile import SnapshotError, load_snapshot
    from webhook.ruleset.files import RuleFileError, load_rules

    def one(path: str) -> dict[str, Any] | str:
        items = list(read_sources([path]))
        errors = [i for i in items if not isinstance(i, Document)]
        if errors:
            return f"{errors[0].source}: {errors[0].message}"
        if len(items) != 1:
            return f"{path}: holds {len(items)} objects; give a file with exactly one"
        document = items[0]
        assert isinstance(document, Document)
        return document.obj

    obj = one(args.file)
    old = one(args.old) if args.old else None
    for found in (obj, old):
        if isinstance(found, str):
            print(f"gpu-admission: {found}", file=sys.stderr)
            return 2
    if args.operation == "UPDATE" and old is None:
        print("gpu-admission: --operation UPDATE needs --old FILE", file=sys.stderr)
        return 2
    try:
        rules = compile_rules(load_rules(rules_folder(args.rules)))
        cluster = load_snapshot(args.cluster_snapshot) if args.cluster_snapshot else None
    except (RuleFileError, SnapshotError) as exc:
        print(f"gpu-admission: {exc}", file=sys.stderr)
        return 2
    table = rules.workloads
    assert isinstance(obj, dict) and (old is None or isinstance(old, dict))
    review = admission_review(
        obj,
        table,
        operation=args.operation,
        namespace=args.namespace,
        dry_run=args.dry_run,
        old=old,
    )
    if args.mutated:
        # What the apiserver sends to /validate: the same request, the object after /mutate.
        request = review["request"]
        outcome = admit(
            Request(obj=obj, namespace=request["namespace"], operation=args.operation, old_obj=old),
            rules,
            cluster,
            stage=Stage.MUTATE,
        )
        patch = outcome.decision.patch if isinstance(outcome, Decided) else ()
        if patch:
            request["object"] = jsonpatch.apply_patch(request["object"], list(patch))
    sys.stdout.write(orjson.dumps(review, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _audit(args: argparse.Namespace) -> int:
    from webhook.audit.cli import run_audit

    return run_audit(args)


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


RULES_HELP = (
    "folder of rule files, or one rule file (default: $GPU_ADMISSION_RULES, else ./rules when "
    "there is one, else the built-in defaults)"
)


def _rules_option(parser: argparse.ArgumentParser, *, positional: bool = False) -> None:
    """`--rules PATH`, as every subcommand takes it; `rules check DIR` (the older spelling)
    stays accepted where `positional`."""
    parser.add_argument("--rules", metavar="PATH", help=RULES_HELP)
    if positional:
        parser.add_argument("dir", nargs="?", metavar="PATH", help="the same as --rules PATH")


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

    add_serve_parser(sub, RULES_HELP, _serve)
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
    _rules_option(aud)
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
    aud.set_defaults(func=_audit)

    rev = sub.add_parser(
        "review",
        help="print the AdmissionReview the apiserver would send for the object in FILE",
    )
    rev.add_argument("file", help="a YAML or JSON file with one object (- for stdin)")
    rev.add_argument(
        "--operation",
        choices=["CREATE", "UPDATE"],
        default="CREATE",
        help="the request's operation (default: CREATE); UPDATE needs --old",
    )
    rev.add_argument("--namespace", help="the request's namespace (default: the object's)")
    rev.add_argument("--dry-run", action="store_true", help="as `kubectl apply --dry-run=server`")
    rev.add_argument("--old", help="the object before the update (UPDATE)")
    _rules_option(rev)
    rev.add_argument(
        "--mutated",
        action="store_true",
        help="the object after the webhook's own patch, as the apiserver sends it to /validate",
    )
    rev.add_argument(
        "--cluster-snapshot", help="cluster facts for --mutated (as `serve` was given them)"
    )
    rev.set_defaults(func=_review)

    rules = sub.add_parser("rules", help="check, test and explain rule files")
    rules_sub = rules.add_subparsers(dest="rules_command", required=True)
    chk = rules_sub.add_parser("check", help="validate a rule folder (exit 1 on any error)")
    _rules_option(chk, positional=True)
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
    _rules_option(tst, positional=True)
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
    _rules_option(hooks, positional=True)
    hooks.add_argument("--out", help="write to this file instead of stdout")
    exp = rules_sub.add_parser("explain", help="effective settings for one namespace")
    _rules_option(exp, positional=True)
    exp.add_argument("--namespace", required=True, help="the namespace to explain")
    exp.add_argument("--labels", help="namespace labels, k=v,k=v")
    rules.set_defaults(func=_rules)

    expo = sub.add_parser(
        "export", help="native admission policies for the rules that need no webhook"
    )
    _rules_option(expo)
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
