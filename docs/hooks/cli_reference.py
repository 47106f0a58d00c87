"""The CLI reference page, generated from the command's own parser when the site is built.

Every subcommand, option, default and example comes from `webhook.cli.build_parser()` (the
examples from `webhook.cliexamples`), so the page says what `--help` says and cannot fall
behind it. `mkdocs build` calls `on_files`; `render()` is what tests read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAGE = "cli.md"


def _parser() -> argparse.ArgumentParser:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from webhook.cli import build_parser

    return build_parser()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    takes = action.nargs != 0
    metavar = action.metavar or (action.dest.upper() if takes else "")
    if action.choices is not None and takes:
        metavar = "{" + ",".join(str(c) for c in action.choices) + "}"
    names = ", ".join(f"`{o}`" for o in action.option_strings)
    return f"{names} `{metavar}`" if takes else names


def _options(sub: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        help_text = (action.help or "") % {"default": action.default, "prog": sub.prog}
        rows.append(f"| {_flags(action)} | {_cell(help_text)} |")
    if not rows:
        return []
    return ["| Option | What it does |", "| --- | --- |", *rows, ""]


def _usage(sub: argparse.ArgumentParser) -> str:
    """The usage lines as `--help` prints them, wrapped to fit the page's code block."""
    formatter = argparse.HelpFormatter(sub.prog, width=88)
    formatter.add_usage(sub.usage, sub._actions, sub._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip("\n")


def _summaries(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each subcommand's one-line help, as its parent lists it."""
    out: dict[str, str] = {}

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    key = f"{path} {choice.dest}".strip()
                    out[key] = choice.help or ""
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}".strip())

    walk(parser, "")
    return out


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The page's markdown."""
    from webhook.cliexamples import EXAMPLES, commands

    parser = parser or _parser()
    summaries = _summaries(parser)
    out = [
        "# Command line",
        "",
        "Every `gpu-admission` subcommand and option, as `gpu-admission SUBCOMMAND --help` prints",
        "them. This page is generated from the command's own parser each time the site is",
        "built. Where a subcommand reads rules, `--rules PATH` takes a folder of rule files or a",
        "single rule file; left out, the rules come from `$GPU_ADMISSION_RULES`, else `./rules`",
        "when there is one, else the built-in defaults.",
        "",
    ]
    for path, sub in commands(parser).items():
        if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            continue  # a group (`certs`, `rules`): its subcommands follow
        summary = _cell(summaries.get(path, ""))
        out += [f"## {path}", "", summary[:1].upper() + summary[1:] + ".", ""]
        if sub.description:
            out += [_cell(sub.description), ""]
        out += ["```", _usage(sub), "```", ""]
        out += _options(sub)
        lines = EXAMPLES.get(path, ())
        if lines:
            out += ["Examples:", "", "```sh", *lines, "```", ""]
    return "\n".join(out)


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated page to the site (nothing is written to docs/)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files
