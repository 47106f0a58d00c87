"""`gpu-admission review`: the AdmissionReview the apiserver would send for the one object in
a file (and, with --mutated, the object as this webhook's /mutate leaves it), for posting to
a webhook by hand or reading what it is sent."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook.clioptions import add_rules_option
from webhook.ruleset.files import rules_folder

__all__ = ["add_review_parser", "run_review"]


def add_review_parser(sub: Any) -> None:
    """The `review` subcommand on `sub` (the parent parser's subparsers)."""
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
    add_rules_option(rev)
    rev.add_argument(
        "--mutated",
        action="store_true",
        help="the object after the webhook's own patch, as the apiserver sends it to /validate",
    )
    rev.add_argument(
        "--cluster-snapshot", help="cluster facts for --mutated (as `serve` was given them)"
    )
    rev.set_defaults(func=run_review)


def run_review(args: argparse.Namespace) -> int:
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
