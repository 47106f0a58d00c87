"""The flags of `gpu-admission certs generate` and `certs inject`, beside the code they run;
`webhook.cli` adds them to the command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_HOSTS", "add_certs_parser"]

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


def add_certs_parser(sub: Any) -> None:
    """The `certs` subcommands on `sub` (the parent parser's subparsers)."""
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
