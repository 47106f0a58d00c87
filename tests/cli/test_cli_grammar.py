"""One grammar for the whole command: `--rules PATH` wherever rules are read (a folder or one
file), every option explained, every subcommand's help ending with examples that parse, and
the CLI reference page made from the same parser."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shlex
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from webhook.cli import build_parser, main
from webhook.cliexamples import EXAMPLES, commands

PARSER = build_parser()
COMMANDS = commands(PARSER)
READS_RULES = (
    "serve", "audit", "review", "export",
    "rules check", "rules test", "rules webhooks", "rules explain",
)  # fmt: skip


def _options() -> list[tuple[str, argparse.Action]]:
    return [
        (path, action)
        for path, sub in {"": PARSER, **COMMANDS}.items()
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
    ]


@pytest.mark.parametrize(
    ("path", "action"), _options(), ids=lambda v: v if isinstance(v, str) else v.dest
)
def test_every_option_says_what_it_does(path: str, action: argparse.Action) -> None:
    assert action.help, f"gpu-admission {path}: {action.option_strings or action.dest} has no help"


def _invocations(line: str) -> list[str]:
    """The gpu-admission command lines inside an example (`eval "$(...)"`, `> file` cut off)."""
    found = re.findall(r"gpu-admission [^)>|]*", line)
    return [shlex.split(f.strip())[1:] for f in found]  # type: ignore[misc]


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_subcommand_ends_its_help_with_examples_that_parse(path: str) -> None:
    lines = EXAMPLES.get(path, ())
    assert 2 <= len(lines) <= 3, f"{path}: {len(lines)} examples"
    help_text = COMMANDS[path].format_help()
    assert help_text.rstrip().endswith(lines[-1])
    for line in lines:
        assert f"  {line}\n" in help_text
        calls = _invocations(line)
        assert calls, line
        for argv in calls:
            with contextlib.redirect_stderr(io.StringIO()) as err:
                try:
                    PARSER.parse_args(argv)
                except SystemExit:
                    pytest.fail(f"{line!r} does not parse: {err.getvalue()}")


@pytest.mark.parametrize("path", READS_RULES)
def test_rules_path_is_taken_wherever_rules_are_read(path: str) -> None:
    extra = {"review": ["pod.yaml"], "rules explain": ["--namespace", "x"]}.get(path, [])
    args = PARSER.parse_args([*path.split(), "--rules", "team.yaml", *extra])
    assert args.rules == "team.yaml"


def _check(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_a_single_rule_file_a_folder_and_the_older_positional_form_all_work(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "team.yaml").write_text("mode: audit\n")
    assert _check("rules", "check", "--rules", str(folder / "team.yaml"))[0] == 0
    assert _check("rules", "check", "--rules", str(folder))[0] == 0
    assert _check("rules", "check", str(folder))[0] == 0  # `rules check DIR` stays
    (folder / "bad.yaml").write_text("mode: sometimes\n")
    code, out, err = _check("rules", "check", "--rules", str(folder / "bad.yaml"))
    assert code == 1 and "bad.yaml" in out + err
    # a single file is the whole rule set: its folder's other files are not read
    assert _check("rules", "check", "--rules", str(folder / "team.yaml"))[0] == 0


def test_an_empty_folder_is_an_error_that_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "rules"
    empty.mkdir()
    for argv in (["rules", "check", "--rules", str(empty)], ["export", "--rules", str(empty)]):
        code, out, err = _check(*argv)
        assert code in (1, 2), argv
        assert f"{empty}: an empty folder" in out + err, (argv, out, err)


def test_rules_given_twice_must_agree(tmp_path: Path) -> None:
    code, _, err = _check("rules", "check", "a", "--rules", "b")
    assert code == 2 and "rules given twice" in err


def test_the_cli_reference_page_is_the_parser() -> None:
    spec = importlib.util.spec_from_file_location(
        "cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = module.render(PARSER)
    for path, sub in COMMANDS.items():
        if any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            continue
        assert f"## {path}\n" in page
        for line in EXAMPLES[path]:
            assert f"\n{line}\n" in page
    for _, action in _options():
        for flag in action.option_strings:
            if action.help != argparse.SUPPRESS and flag not in ("--version",):
                assert f"`{flag}`" in page, flag
    # a reader needs no scrolling for the usage lines
    usages = re.findall(r"```\n(gpu-admission .*?)```", page, flags=re.S)
    assert usages and all(len(line) <= 88 for u in usages for line in u.splitlines())


def test_serve_reloads_a_single_rule_file_as_it_does_a_folder(tmp_path: Path) -> None:
    from webhook.server.reload import RuleHolder

    rule_file = tmp_path / "team.yaml"
    rule_file.write_text("mode: audit\n")
    holder = RuleHolder(source=rule_file)
    assert holder.refresh() and holder.current is not None
    assert holder.current.base.ceiling == "audit"
    rule_file.write_text("mode: warn\n")
    assert holder.refresh() and holder.current.base.ceiling == "warn"
    assert not holder.refresh()  # unchanged: nothing reloaded
