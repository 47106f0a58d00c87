"""The option every subcommand that reads rules takes, `--rules PATH`, written once: each
subcommand's parser (server, audit, rules) adds it from here."""

from __future__ import annotations

import argparse

__all__ = ["RULES_HELP", "add_rules_option"]

RULES_HELP = (
    "folder of rule files, or one rule file (default: $GPU_ADMISSION_RULES, else ./rules when "
    "there is one, else the built-in defaults)"
)


def add_rules_option(parser: argparse.ArgumentParser, *, positional: bool = False) -> None:
    """`--rules PATH`; `rules check DIR` (the older spelling) stays accepted where
    `positional`."""
    parser.add_argument("--rules", metavar="PATH", help=RULES_HELP)
    if positional:
        parser.add_argument("dir", nargs="?", metavar="PATH", help="the same as --rules PATH")
