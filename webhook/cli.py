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

from webhook.ruleset.files import rules_folder
from webhook.server.cli import add_serve_parser

__all__ = ["main"]

MIB = 1024 * 1024

DEFAULT_HOSTS = (
    "localhost,127.0.0.1,gpu-admission,gpu-admission.gpu-admission,"
    "gpu-admission.gpu-admission.svc,gpu-admission.gpu-admission.svc.cluster.local"
)


def _certs_generate(args: argparse.Namespace) -> int:
    from webhook.certs.generate import CertPaths, generate

    out = Path(args.out)
    existing = CertPaths.in_folder(out)
    if args.if_missing and existing.complete():
        print(f"certificates already in {out}/")
        return 0
    if not args.force and (existing.ca_cert.exists() or existing.ca_key.exists()):
        # A new CA invalidates every caBundle already injected and every cert it signed.
        missing = [
            p.name for p in (existing.ca_cert, existing.cert, existing.key) if not p.is_file()
        ]
        keep = (
            f"it lacks {', '.join(missing)}, so it cannot be kept as it is"
            if args.if_missing
            else "or --if-missing to keep it"
        )
        print(
            f"gpu-admission: {out}/ already holds a CA ({existing.ca_cert.name}); pass --force "
            f"to replace it (then inject the new CA bundle again); {keep}",
            file=sys.stderr,
        )
        return 2
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    try:
        paths = generate(out, hosts)
    except (OSError, ValueError) as exc:
        print(f"gpu-admission: {exc}", file=sys.stderr)
        return 2
    print(f"wrote for {', '.join(hosts)}:")
    for path in (paths.ca_cert, paths.ca_key, paths.cert, paths.key):
        print(f"  {path}")
    return 0


def _certs_inject(args: argparse.Namespace) -> int:
    from webhook.certs.inject import check_pem, inject_ca_bundle_file
    from webhook.yamlinput import unreadable

    ca, target = Path(args.ca), Path(args.file)
    try:
        pem = ca.read_bytes()
        check_pem(pem)
    except (OSError, ValueError) as exc:
        reason = unreadable(exc) if isinstance(exc, OSError) else str(exc)
        print(f"gpu-admission: --ca {ca}: {reason}", file=sys.stderr)
        return 2
    if not target.is_file():
        print(
            f"gpu-admission: --file {target}: no such file; give the YAML file holding the "
            "webhook configurations (the default is relative to the repository's root)",
            file=sys.stderr,
        )
        return 2
    try:
        count = inject_ca_bundle_file(target, pem)
    except (OSError, ValueError) as exc:
        print(f"gpu-admission: --file {target}: {exc}", file=sys.stderr)
        return 2
    webhooks = "webhook" if count == 1 else "webhooks"
    print(f"wrote the CA bundle of {ca} into {count} {webhooks} in {target}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from webhook.logs import setup
    from webhook.server.app import serve
    from webhook.server.limits import Limits

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

    folder = rules_folder(args.dir)
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
        cases = [Path(c) for c in args.cases] or ([folder / "tests"] if folder else [])
        if not cases:
            print("gpu-admission: no rules folder and no --cases: nothing to test", file=sys.stderr)
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
    return export(
        folder, args.kubernetes, out, sys.stdout, sys.stderr, webhook_only=args.webhook_only
    )


def _completion(args: argparse.Namespace) -> int:
    """Print the completion script: shells source it (docs/audits.md, "Shell completion")."""
    from webhook.completion import script

    sys.stdout.write(script(build_parser(), args.shell))
    return 0


RULES_HELP = (
    "folder of rule files (default: $GPU_ADMISSION_RULES, else ./rules when there is one, "
    "else the built-in defaults)"
)


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

    certs = sub.add_parser("certs", help="certificate tooling")
    certs_sub = certs.add_subparsers(dest="certs_command", required=True)
    gen = certs_sub.add_parser("generate", help="write a CA and a serving certificate")
    gen.add_argument("--out", default="certs", help="folder to write into (default: certs)")
    gen.add_argument("--hosts", default=DEFAULT_HOSTS, help="comma-separated DNS names and IPs")
    gen.add_argument(
        "--if-missing", action="store_true", help="do nothing when the folder already has them"
    )
    gen.add_argument("--force", action="store_true", help="replace a CA already in the folder")
    gen.set_defaults(func=_certs_generate)
    inj = certs_sub.add_parser(
        "inject", help="write the CA bundle into the webhook configurations of a YAML file"
    )
    inj.add_argument("--ca", default="certs/ca.crt", help="CA certificate (PEM)")
    inj.add_argument(
        "--file",
        default="manifests/overlays/self-signed/webhooks-cabundle.yaml",
        help="YAML file holding the webhook configurations (rewritten in place)",
    )
    inj.set_defaults(func=_certs_inject)

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
    aud.add_argument("--rules", help=RULES_HELP)
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
    aud.add_argument("--fail-on", choices=["deny", "warn"], default="deny")
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
    rev.add_argument("--operation", choices=["CREATE", "UPDATE"], default="CREATE")
    rev.add_argument("--namespace", help="the request's namespace (default: the object's)")
    rev.add_argument("--dry-run", action="store_true", help="as `kubectl apply --dry-run=server`")
    rev.add_argument("--old", help="the object before the update (UPDATE)")
    rev.add_argument("--rules", help=RULES_HELP)
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
    chk.add_argument("dir", nargs="?", help=RULES_HELP)
    chk.add_argument(
        "--cluster-snapshot",
        help="also compare the budgets with this cluster's ResourceQuotas and say where they "
        "disagree",
    )
    sch = rules_sub.add_parser("schema", help="print the JSON Schema of rule files")
    sch.add_argument("dir", nargs="?", help=argparse.SUPPRESS)
    sch.add_argument("--out", help="write to this file instead of stdout")
    tst = rules_sub.add_parser("test", help="run rule test cases (default: DIR/tests)")
    tst.add_argument("dir", nargs="?", help=RULES_HELP)
    tst.add_argument("--cases", action="append", default=[], help="case file or folder")
    tst.add_argument(
        "--cluster-snapshot",
        help="cluster facts for every case whose file or case names no clusterSnapshot",
    )
    hooks = rules_sub.add_parser(
        "webhooks", help="print the webhook configurations that route this rule set's kinds"
    )
    hooks.add_argument("dir", nargs="?", help=RULES_HELP)
    hooks.add_argument("--out", help="write to this file instead of stdout")
    exp = rules_sub.add_parser("explain", help="effective settings for one namespace")
    exp.add_argument("dir", nargs="?", help=RULES_HELP)
    exp.add_argument("--namespace", required=True)
    exp.add_argument("--labels", help="namespace labels, k=v,k=v")
    rules.set_defaults(func=_rules)

    expo = sub.add_parser(
        "export", help="native admission policies for the rules that need no webhook"
    )
    expo.add_argument("--rules", metavar="DIR", help=RULES_HELP)
    expo.add_argument(
        "--kubernetes", default="1.36", metavar="1.N", help="target version (default 1.36)"
    )
    expo.add_argument("--out", metavar="DIR", help="write DIR/policies.yaml instead of stdout")
    expo.add_argument(
        "--webhook-only",
        action="store_true",
        help="the rule file that switches off in the webhook what the policies now do",
    )
    expo.set_defaults(func=_export)

    comp = sub.add_parser("completion", help="print a shell completion script (bash or zsh)")
    comp.add_argument("shell", choices=["bash", "zsh"])
    comp.set_defaults(func=_completion)
    return parser


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
