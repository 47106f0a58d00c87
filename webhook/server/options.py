"""Every setting of `gpu-admission serve` in one value, `ServeOptions`: each field carries its
default and its help text, the command's parser is built from the fields (server/cli.py), and
`serve(options)` starts the server with it (app.py).

Defaults owned elsewhere are read from there, not restated: the limits per client from
`Limits` (the HTTP wing), the hold times from `webhook.facts.holdtimes`.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from webhook.clioptions import RULES_HELP
from webhook.facts.holdtimes import HOLD_SECONDS, HOLD_SETTLE_SECONDS
from webhook.server.http.limits import Limits, MiB

__all__ = ["Flag", "ServeOptions", "optional_path", "positive", "tcp_port"]

T = TypeVar("T")


def positive(kind: type[int] | type[float], *, zero: bool = False) -> Callable[[str], Any]:
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


def tcp_port(text: str) -> int:
    """An argparse type: a TCP port, or 0."""
    value = positive(int, zero=True)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text!r}")
    return int(value)


def optional_path(text: str) -> Path | None:
    """An argparse type: a path, or None for an empty value (as if the flag were not given)."""
    return Path(text) if text else None


@dataclass(frozen=True)
class Flag:
    """How a field of `ServeOptions` is spelled on the command line: `--<name-with-dashes>`,
    with this help, read by `parse` (or as `action` says), listed under `group` if any."""

    help: str
    parse: Callable[[str], Any] | None = None  # argparse type=
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    action: str | type[argparse.Action] | None = None
    group: str | None = None


LIMITS = "limits per client (docs/threat-model.md)"


def option(default: T, help: str, **how: Any) -> T:
    """A field with its default and its flag."""
    return field(default=default, metadata={"flag": Flag(help, **how)})


def computed(factory: Callable[[], T], help: str, **how: Any) -> T:
    """A field whose default is worked out when the parser is built (it depends on where the
    command runs)."""
    return field(default_factory=factory, metadata={"flag": Flag(help, **how)})


def _log_format() -> str:
    """json: one object per line, unless a person reads the terminal."""
    return "json" if not sys.stderr.isatty() else "text"


@dataclass(frozen=True)
class ServeOptions:
    """What `serve` listens on, reads, holds and bounds. The order of the fields is the order
    of the flags in `gpu-admission serve --help`."""

    host: str = option("127.0.0.1", "address to listen on (default: 127.0.0.1; 0.0.0.0 in a pod)")
    port: int = option(8443, "HTTPS port of /mutate and /validate", parse=tcp_port)
    probe_port: int = option(
        8081,
        "plain-HTTP port of /healthz, /readyz and /metrics (default: 8081); 0 serves them on "
        "the HTTPS port instead",
        parse=tcp_port,
    )
    cert: Path = option(
        Path("certs/tls.crt"), "serving certificate, PEM (default: certs/tls.crt)", parse=Path
    )
    key: Path = option(
        Path("certs/tls.key"), "its private key, PEM (default: certs/tls.key)", parse=Path
    )
    rules: str | None = option(None, RULES_HELP, metavar="PATH")
    rules_check_seconds: float = option(
        2.0, "how often to look for rule edits (default: 2)", parse=float
    )
    cluster_snapshot: Path | None = option(
        None,
        "cluster facts from this file instead of a cluster (examples/cluster-snapshot.yaml)",
        parse=optional_path,
    )
    kubeconfig: Path | None = option(
        None, "read cluster facts through this kubeconfig", parse=optional_path
    )
    client_ca: Path | None = option(
        None,
        "require client certificates signed by this CA (the apiserver's, when configured)",
        parse=optional_path,
    )
    cert_check_seconds: float = option(
        10.0, "how often to look for a rotated serving certificate (default: 10)", parse=float
    )
    log_format: str = computed(
        _log_format,
        "json: one object per line with structured fields (default when not a terminal)",
        choices=("text", "json"),
    )
    in_cluster: bool = option(
        False,
        "read cluster facts with the pod's service account (the default inside a pod)",
        action="store_true",
    )
    no_cluster: bool = option(False, "no cluster facts, even inside a pod", action="store_true")
    log_level: str = option(
        "info",
        "the least severe log lines written (default: info)",
        choices=("debug", "info", "warning", "error"),
    )
    max_connections: int = option(
        Limits.max_connections,
        "open connections on the HTTPS port, counted from accept; at the cap one doing no "
        "request's work is closed to make room, or the new one refused (default: 256)",
        parse=positive(int),
        group=LIMITS,
    )
    header_timeout: float = option(
        Limits.header_timeout,
        "seconds for the TLS handshake, and for a request head once it starts (default: 10)",
        parse=positive(float),
        group=LIMITS,
    )
    body_timeout: float = option(
        Limits.body_timeout,
        "seconds for a request body once its head is in; then 408 (default: 10)",
        parse=positive(float),
        group=LIMITS,
    )
    idle_timeout: float = option(
        Limits.idle_timeout,
        "seconds an idle keep-alive connection stays open (default: 120, above the apiserver's 90)",
        parse=positive(float),
        group=LIMITS,
    )
    max_body_mib: float = option(
        Limits.max_body / MiB,
        "largest request body; larger gets 413 before it is read (default: 8)",
        parse=positive(float),
        group=LIMITS,
    )
    body_memory_mib: float = option(
        Limits.body_memory / MiB,
        "memory for bodies over 128 KiB in flight at once; beyond it such requests get "
        "503 (default: 64)",
        parse=positive(float),
        group=LIMITS,
    )
    release_memory: bool = option(
        True,
        "give the memory of large bodies back to the OS once they are answered (glibc: "
        "buffers over 128 KiB mapped on their own, malloc_trim after bodies over 1 MiB; "
        "default: on)",
        action=argparse.BooleanOptionalAction,
        group=LIMITS,
    )
    drain_seconds: float = option(
        5.0,
        "on SIGTERM, fail /readyz and keep serving this long before closing the listener, "
        "so endpoint removal reaches every client (default: 5)",
        parse=positive(float, zero=True),
    )
    profile_stages: bool = option(
        False,
        "time every review's stages and serve the totals at GET /debug/stages "
        "(bench/load.py --profile; costs a little per review)",
        action="store_true",
    )
    hold_seconds: float = option(
        HOLD_SECONDS,
        "the longest an admitted GPU pod's GPUs are held until the watch shows the pod "
        "(default: 30; 0 disables holds)",
        parse=positive(float, zero=True),
    )
    hold_settle_seconds: float = option(
        HOLD_SETTLE_SECONDS,
        "with a current watch of pods, a hold the watch has not matched after this long "
        "ends (the create was refused later in the admission chain, or never made); at least "
        "the longest timeoutSeconds of the cluster's validating webhooks on pods plus 2 when "
        "their configurations can be read (default: 10, the apiserver's default webhook "
        "timeout)",
        parse=positive(float),
    )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeOptions:
        """The options the parser server/cli.py builds from these fields read."""
        return cls(**{spec.name: getattr(args, spec.name) for spec in fields(cls)})

    @property
    def limits(self) -> Limits:
        """What each client may cost, as the HTTP wing takes it."""
        return Limits(
            max_body=int(self.max_body_mib * MiB),
            body_memory=int(self.body_memory_mib * MiB),
            max_connections=self.max_connections,
            header_timeout=self.header_timeout,
            body_timeout=self.body_timeout,
            idle_timeout=self.idle_timeout,
        )

    @property
    def separate_probe_port(self) -> int | None:
        """The probes' own port; None: they are served on the HTTPS port."""
        return self.probe_port or None

    def reads_cluster_in_pod(self, environ: Mapping[str, str]) -> bool:
        """Cluster facts through the pod's service account: asked for, or running in a pod
        and not told otherwise."""
        return self.in_cluster or (not self.no_cluster and "KUBERNETES_SERVICE_HOST" in environ)
