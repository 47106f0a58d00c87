"""The flags of `gpu-admission serve` (the limits per client among them), beside the server
they configure; `webhook.cli` starts it."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["add_serve_parser", "positive"]

MIB = 1024 * 1024


def positive(kind: type[int] | type[float], *, zero: bool = False) -> Any:
    """An argparse type: a number > 0 (or >= 0), refused with a clear message otherwise."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a{'n integer' if kind is int else ' number'}: {text!r}"
            ) from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"must be {'>= 0' if zero else '> 0'}: {text!r}")
        return value

    return parse


def _port(text: str) -> int:
    value = positive(int, zero=True)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text!r}")
    return int(value)


def add_serve_parser(sub: Any, rules_help: str, run: Callable[[argparse.Namespace], int]) -> None:
    """The `serve` subcommand on `sub` (the parent parser's subparsers), handled by `run`."""
    srv = sub.add_parser("serve", help="serve /mutate and /validate over HTTPS")
    srv.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1; 0.0.0.0 in a pod)",
    )
    srv.add_argument("--port", type=_port, default=8443, help="HTTPS port of /mutate and /validate")
    srv.add_argument(
        "--probe-port",
        type=_port,
        default=8081,
        help="plain-HTTP port of /healthz, /readyz and /metrics (default: 8081); 0 serves them "
        "on the HTTPS port instead",
    )
    srv.add_argument(
        "--cert", default="certs/tls.crt", help="serving certificate, PEM (default: certs/tls.crt)"
    )
    srv.add_argument(
        "--key", default="certs/tls.key", help="its private key, PEM (default: certs/tls.key)"
    )
    srv.add_argument("--rules", metavar="PATH", help=rules_help)
    srv.add_argument(
        "--rules-check-seconds",
        type=float,
        default=2.0,
        help="how often to look for rule edits (default: 2)",
    )
    srv.add_argument(
        "--cluster-snapshot",
        help="cluster facts from this file instead of a cluster (examples/cluster-snapshot.yaml)",
    )
    srv.add_argument("--kubeconfig", help="read cluster facts through this kubeconfig")
    srv.add_argument(
        "--client-ca",
        help="require client certificates signed by this CA (the apiserver's, when configured)",
    )
    srv.add_argument(
        "--cert-check-seconds",
        type=float,
        default=10.0,
        help="how often to look for a rotated serving certificate (default: 10)",
    )
    srv.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="json" if not sys.stderr.isatty() else "text",
        help="json: one object per line with structured fields (default when not a terminal)",
    )
    srv.add_argument(
        "--in-cluster",
        action="store_true",
        help="read cluster facts with the pod's service account (the default inside a pod)",
    )
    srv.add_argument(
        "--no-cluster", action="store_true", help="no cluster facts, even inside a pod"
    )
    srv.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the least severe log lines written (default: info)",
    )
    lim = srv.add_argument_group("limits per client (docs/threat-model.md)")
    lim.add_argument(
        "--max-connections",
        type=positive(int),
        default=256,
        help="open connections on the HTTPS port, counted from accept; at the cap one doing no "
        "request's work is closed to make room, or the new one refused (default: 256)",
    )
    lim.add_argument(
        "--header-timeout",
        type=positive(float),
        default=10.0,
        help="seconds for the TLS handshake, and for a request head once it starts (default: 10)",
    )
    lim.add_argument(
        "--body-timeout",
        type=positive(float),
        default=10.0,
        help="seconds for a request body once its head is in; then 408 (default: 10)",
    )
    lim.add_argument(
        "--idle-timeout",
        type=positive(float),
        default=120.0,
        help="seconds an idle keep-alive connection stays open (default: 120, above the "
        "apiserver's 90)",
    )
    lim.add_argument(
        "--max-body-mib",
        type=positive(float),
        default=8.0,
        help="largest request body; larger gets 413 before it is read (default: 8)",
    )
    lim.add_argument(
        "--body-memory-mib",
        type=positive(float),
        default=64.0,
        help="memory for bodies over 128 KiB in flight at once; beyond it such requests get "
        "503 (default: 64)",
    )
    lim.add_argument(
        "--release-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give the memory of large bodies back to the OS once they are answered (glibc: "
        "buffers over 128 KiB mapped on their own, malloc_trim after bodies over 1 MiB; "
        "default: on)",
    )
    srv.add_argument(
        "--drain-seconds",
        type=positive(float, zero=True),
        default=5.0,
        help="on SIGTERM, fail /readyz and keep serving this long before closing the listener, "
        "so endpoint removal reaches every client (default: 5)",
    )
    srv.add_argument(
        "--profile-stages",
        action="store_true",
        help="time every review's stages and serve the totals at GET /debug/stages "
        "(bench/load.py --profile; costs a little per review)",
    )
    srv.add_argument(
        "--hold-seconds",
        type=positive(float, zero=True),
        default=30.0,
        help="the longest an admitted GPU pod's GPUs are held until the watch shows the pod "
        "(default: 30; 0 disables holds)",
    )
    srv.add_argument(
        "--hold-settle-seconds",
        type=positive(float),
        default=10.0,
        help="with a current watch of pods, a hold the watch has not matched after this long "
        "ends (the create was refused later in the admission chain, or never made); at least "
        "the longest timeoutSeconds of the cluster's validating webhooks on pods plus 2 when "
        "their configurations can be read (default: 10, the apiserver's default webhook "
        "timeout)",
    )
    srv.set_defaults(func=run)
