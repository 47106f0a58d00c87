"""`gpu-admission snapshot`: a live cluster's facts written to the file `--cluster-snapshot`
reads, so an audit, a rule test or a review can be run later, elsewhere, on the same facts."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["add_snapshot_parser", "cluster_client"]


def cluster_client(kubeconfig: str | None, in_cluster: bool) -> Any:
    """An API client from a kubeconfig (default: as kubectl finds it) or, in a pod, from its
    service account."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if in_cluster:
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return client.ApiClient(cfg)


def _snapshot(args: argparse.Namespace) -> int:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    from webhook.audit.cli import api_reason
    from webhook.facts.snapshotwrite import SnapshotReadError, snapshot_document, to_yaml

    in_cluster = args.in_cluster or (
        args.kubeconfig is None
        and "KUBECONFIG" not in os.environ
        and not (Path.home() / ".kube" / "config").is_file()
        and "KUBERNETES_SERVICE_HOST" in os.environ
    )
    try:
        # the client's pooled connections are closed once the cluster is read
        with cluster_client(args.kubeconfig, in_cluster) as api:
            doc, notes = snapshot_document(api, namespaces=args.namespace)
    except SnapshotReadError as exc:
        print(f"gpu-admission: cannot list {exc.section}: {api_reason(exc.cause)}", file=sys.stderr)
        return 2
    except (ConfigException, ApiException, HTTPError, OSError) as exc:
        # no kubeconfig, the cluster unreachable: nothing was written
        print(f"gpu-admission: cannot read the cluster: {api_reason(exc)}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"gpu-admission: {note}", file=sys.stderr)
    text = to_yaml(doc)
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            print(f"gpu-admission: --out {args.out}: {exc.strerror}", file=sys.stderr)
            return 2
        counts = ", ".join(
            f"{len(v)} {k}" for k, v in doc.items() if k in ("namespaces", "nodes", "pods")
        )
        print(f"wrote the facts of {counts} to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def add_snapshot_parser(sub: Any, run: Callable[[argparse.Namespace], int] = _snapshot) -> None:
    """The `snapshot` subcommand on `sub` (the parent parser's subparsers)."""
    snap = sub.add_parser(
        "snapshot",
        help="write a live cluster's facts to a file --cluster-snapshot reads",
        description="Write the cluster facts the quota, priority and schedulability rules\n"
        "read (nodes, namespaces, quotas, priority classes, pods, and the autoscaler, DRA\n"
        "and KServe objects where served) to a snapshot file, sorted: the same cluster\n"
        "gives the same bytes. Secrets are never read.",
    )
    snap.add_argument(
        "--kubeconfig", help="the kubeconfig (default: as kubectl finds it; in a pod, its own)"
    )
    snap.add_argument(
        "--in-cluster",
        action="store_true",
        help="use the pod's service account, not a kubeconfig",
    )
    snap.add_argument(
        "--namespace",
        action="append",
        metavar="NS",
        help="only this namespace's objects (repeatable); nodes, priority classes and the "
        "other cluster-wide facts are always written",
    )
    snap.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    snap.set_defaults(func=run)
