"""`gpu-admission serve`: its flags, each built from a field of `ServeOptions` (options.py),
and what running it does; `webhook.cli` adds it to the command."""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import MISSING, Field, fields
from typing import Any

from webhook.server.options import Flag, ServeOptions

__all__ = ["add_options", "add_serve_parser", "run_serve"]


def add_serve_parser(sub: Any) -> None:
    """The `serve` subcommand on `sub` (the parent parser's subparsers)."""
    srv = sub.add_parser("serve", help="serve /mutate and /validate over HTTPS")
    add_options(srv, ServeOptions)
    srv.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Serve until signalled; 2 when the server cannot start (the reason on stderr)."""
    from webhook.logs import setup
    from webhook.ruleset.files import rules_origin
    from webhook.server.app import serve

    options = ServeOptions.from_args(args)
    setup(options.log_level, options.log_format)
    logging.getLogger("gpu-admission").info("rules from %s", rules_origin(options.rules))
    try:
        serve(options)
    except (OSError, ValueError) as exc:
        print(f"gpu-admission: {exc}", file=sys.stderr)
        return 2
    return 0


def add_options(parser: argparse.ArgumentParser, options: type[Any]) -> None:
    """A flag on `parser` for each field of the dataclass `options`, in field order:
    `--<name-with-dashes>`, its default the field's, the rest as its `Flag` says."""
    groups: dict[str, Any] = {}
    for spec in fields(options):
        flag: Flag = spec.metadata["flag"]
        target: Any = parser
        if flag.group is not None:
            target = groups.get(flag.group) or parser.add_argument_group(flag.group)
            groups[flag.group] = target
        how: dict[str, Any] = {"default": _default(spec), "help": flag.help}
        if flag.parse is not None:
            how["type"] = flag.parse
        if flag.choices is not None:
            how["choices"] = list(flag.choices)
        if flag.metavar is not None:
            how["metavar"] = flag.metavar
        if flag.action is not None:
            how["action"] = flag.action
        target.add_argument("--" + spec.name.replace("_", "-"), **how)


def _default(spec: Field[Any]) -> Any:
    """A field's default; one with a factory is worked out now (where the command runs)."""
    if spec.default_factory is not MISSING:
        return spec.default_factory()
    return spec.default
