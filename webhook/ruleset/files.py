"""Load a rule folder into one validated `RuleSet`, or say exactly where and why it can't be.

Files are laid over each other key by key (`load_rules_with_sources`). Every problem is one
line, `file:line:col: field.path: what is wrong. Fix: how to fix it`, pointing at the key (an
unknown or a missing key) or at the value (a wrong one), in the order an editor walks them.

Reading costs at most linear work in the file's size, whatever it holds: files over
`MAX_FILE_BYTES` are refused before they are read whole, YAML anchors/aliases (the "billion
laughs" expansion), merge keys and non-standard tags are refused at their line, and nesting
stops at `MAX_DEPTH`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from webhook.modelerrors import Problem, problems
from webhook.ruleset.contradictions import contradictions
from webhook.ruleset.linetree import LineTree
from webhook.ruleset.models import RuleSet
from webhook.ruleset.ruleyaml import Path_, Refused, Where, documents
from webhook.yamlinput import syntax_error, unreadable

__all__ = [
    "LoadedRules",
    "RuleFileError",
    "Where",
    "load_rules",
    "load_rules_with_sources",
    "located",
    "located_in",
    "rule_files",
]

# Far above any real rule set (12k overrides take ~1.6 MB; a ConfigMap holds at most 1 MiB),
# and the most a reload reads into memory per file.
MAX_FILE_BYTES = 16 * 2**20


class RuleFileError(ValueError):
    """A rule folder that does not make a valid rule set; the message lists every problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class LoadedRules:
    """A rule set and where each of its settings was written."""

    rules: RuleSet
    lines: dict[Path_, Where] = field(default_factory=dict)  # field path -> where it is


def rule_files(folder: Path) -> list[Path]:
    """The YAML files of a rule folder, in load order (a single rule file: itself).

    ConfigMap mounts hold dot-prefixed timestamped folders beside the visible symlinks; only
    the visible names count. Sub-folders (such as `tests/`) are not rule files.
    """
    if folder.is_file():  # `--rules FILE`: that one file is the rule set's only layer
        return [folder]
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file()
    )


def _read(path: Path) -> str:
    """The file's text, refusing one larger than any rule file needs before holding it all."""
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise Refused(
            1,
            1,
            f"larger than {MAX_FILE_BYTES // 2**20} MiB. Fix: split it into several files in "
            "the folder, or trim it",
        )
    return data.decode("utf-8-sig")


# Lists whose items are keyed: a later file's item of the same key replaces the earlier one,
# other items are added. Every other list, and every scalar, is replaced whole.
def _override_key(item: Any) -> Any:
    name = item.get("name") if isinstance(item, dict) else None
    return name if isinstance(name, str) else None  # anything else: validation names it


def _workload_key(item: Any) -> Any:
    if not isinstance(item, dict):
        return None
    group, kind = item.get("group", ""), item.get("kind")
    return (group, kind) if isinstance(group, str) and isinstance(kind, str) else None


def _itself(item: Any) -> Any:
    return item if isinstance(item, str) else None


# By field path. Exemption lists add up across files as they add to the built-in ones: two
# teams' files that each exempt their own namespace both count.
_KEYED_LISTS: dict[Path_, Callable[[Any], Any]] = {
    ("overrides",): _override_key,
    ("workloads",): _workload_key,
    ("exemptions", "namespaces"): _itself,
    ("exemptions", "serviceAccounts"): _itself,
    ("exemptions", "remove", "namespaces"): _itself,
}


def _layer(
    merged: dict[str, Any],
    doc: dict[str, Any],
    lines: LineTree[Where],
    file_lines: LineTree[Where],
) -> None:
    """Lay one file over what the earlier files built, key by key; `lines` follows, so each
    setting is traced to the file that set it last. Linear in the file: what a key or a list
    item replaces is dropped, and what the file wrote there moved over, a subtree at a time."""

    def lay(
        base: dict[str, Any], top: dict[str, Any], at: Path_, mine: LineTree[Where] | None
    ) -> None:
        for key, value in top.items():
            here = (*at, key)
            old = base.get(key)
            written = mine.kids.get(key) if mine is not None else None
            if isinstance(value, dict) and isinstance(old, dict):
                if written is not None and written.where is not None:
                    lines.make(here).where = written.where
                lay(old, value, here, written)
            elif here in _KEYED_LISTS and isinstance(value, list) and isinstance(old, list):
                key_of = _KEYED_LISTS[here]
                index = {key_of(item): i for i, item in enumerate(old) if key_of(item) is not None}
                mine_seen: set[Any] = set()  # one file naming an entry twice keeps both: refused
                for j, item in enumerate(value):
                    name = key_of(item)
                    i = index.get(name) if name is not None and name not in mine_seen else None
                    mine_seen.add(name)
                    if i is None:
                        i = len(old)
                        old.append(item)
                    else:
                        old[i] = item
                    lines.graft((*here, i), written.kids.get(j) if written is not None else None)
            else:
                base[key] = value
                lines.graft(here, written)

    lay(merged, doc, (), file_lines)


def _syntax_problem(path: Path, exc: yaml.YAMLError) -> str:
    """`file:line:col: what is wrong. Fix: ...` for YAML the parser could not read."""
    line, _ = syntax_error(exc)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{line}:{mark.column + 1}" if line and mark is not None else str(path)
    problem = getattr(exc, "problem", None)
    what = (
        f"not valid YAML ({problem})" if isinstance(problem, str) and problem else "not valid YAML"
    )
    return (
        f"{where}: {what}. Fix: close every bracket and quote opened before this point, indent "
        "with spaces only, and line up keys of one mapping at one indent"
    )


def _place(problem: Problem, lines: dict[Path_, Where]) -> tuple[str, int, int] | None:
    """(file, line, column) a problem points at: the value at its path, or the key where the
    key is what is wrong; the nearest entry above it that a file wrote, for a key missing
    there (or a path no file wrote)."""
    loc = problem.loc
    where = lines.get(loc)
    if where is not None:
        if problem.on_key:
            return where.file, where.line, where.column
        return where.file, where.value_line, where.value_column
    for end in range(len(loc) - 1, 0, -1):
        where = lines.get(loc[:end])
        if where is not None:
            return where.file, where.line, where.column
    return None


def _report(found: list[Problem], lines: dict[Path_, Where], folder: Path) -> list[str]:
    """`file:line:col: problem` for each, in file, line and column order, as an editor walks
    them; one no file wrote (none should be) names the folder, after the rest."""
    placed = [(_place(p, lines), p) for p in found]
    placed.sort(key=lambda item: (item[0] is None, item[0] or ("", 0, 0)))
    return [f"{'{}:{}:{}'.format(*at) if at else folder}: {p}" for at, p in placed]


RULES_ENV = "GPU_ADMISSION_RULES"


def rules_folder(given: str | Path | None) -> Path | None:
    """Where the rules are: the folder given, else $GPU_ADMISSION_RULES, else ./rules when
    there is one, else None: the built-in defaults. The same for serve, audit and rules."""
    if given:
        return Path(given)
    if os.environ.get(RULES_ENV):
        return Path(os.environ[RULES_ENV])
    here = Path("rules")
    return here if here.is_dir() else None


def rules_origin(given: str | Path | None) -> str:
    """Where `rules_folder(given)` found the rules, said for messages and the start-up log: a
    ./rules picked up from the working directory may be some other tool's rules."""
    if given:
        return str(given)
    if os.environ.get(RULES_ENV):
        return f"{os.environ[RULES_ENV]} (from ${RULES_ENV})"
    if Path("rules").is_dir():
        return (
            "./rules (found in the working directory; --rules or $GPU_ADMISSION_RULES pick another)"
        )
    return "the built-in defaults (no rules folder)"


def load_rules_with_sources(folder: Path | str | None) -> LoadedRules:
    """Lay every YAML file of the folder over the built-in defaults, in name order, and
    validate the result as one rule set.

    A later file overrides an earlier one key by key: maps merge, lists and values are
    replaced, and `overrides` / `workloads` items are replaced by name (by group and kind)
    and otherwise added. So a team's `team.yaml` beside the shipped file changes only what it
    names, and an upgrade of the shipped file never conflicts with it.
    """
    if folder is None:
        return LoadedRules(RuleSet(), {})  # the built-in defaults
    folder = Path(folder)
    if not folder.is_dir() and not folder.is_file():
        raise RuleFileError(
            [
                f"{folder}: no such folder or file. Fix: give the folder that holds the rule "
                "files (rules/ in a checkout, the ConfigMap's mount in a pod), or one rule file"
            ]
        )
    if not rule_files(folder):
        raise RuleFileError(
            [
                f"{folder}: an empty folder (no .yaml or .yml file in it). Fix: give the "
                "folder that holds the rule files, or leave --rules out for the built-in "
                "defaults"
            ]
        )
    merged: dict[str, Any] = {}
    tree: LineTree[Where] = LineTree()
    unread: list[str] = []  # one per file, in file order
    for path in rule_files(folder):
        try:
            docs = list(documents(_read(path), str(path)))
        except Refused as exc:
            unread.append(f"{path}:{exc.line}:{exc.column}: {exc}")
            continue
        except yaml.YAMLError as exc:
            unread.append(_syntax_problem(path, exc))
            continue
        except (OSError, UnicodeDecodeError) as exc:
            unread.append(f"{path}: {unreadable(exc)}. Fix: {_readable(exc)}")
            continue
        for doc, (line, column), file_lines in docs:
            if doc is None:
                continue
            if not isinstance(doc, dict):
                unread.append(
                    f"{path}:{line}:{column}: expected a mapping at the top, found "
                    f"{'a list' if isinstance(doc, list) else 'a single value'}. Fix: start "
                    "the file with top-level keys such as rules:, exemptions: or overrides:"
                )
                continue
            _layer(merged, doc, tree, LineTree.of(file_lines))
    if unread:
        raise RuleFileError(unread)
    lines = tree.flat()
    try:
        rules = RuleSet.model_validate(merged)
    except ValidationError as exc:
        found = problems(exc.errors(include_url=False), RuleSet)
        raise RuleFileError(_report(found, lines, folder)) from None
    crossed = contradictions(rules)  # each setting valid, the whole not
    if crossed:
        raise RuleFileError(_report(crossed, lines, folder))
    return LoadedRules(rules, lines)


def located(found: list[Problem], loaded: LoadedRules, folder: Path | None) -> list[str]:
    """`file:line:col: problem` for problems found in a loaded rule set (the cluster's part
    of `rules check`), in the order an editor walks them."""
    return _report(found, loaded.lines, folder or Path("the built-in defaults"))


def located_in(path: Path, found: list[Problem]) -> list[str]:
    """`file:line:col: problem` for problems of another YAML file read with the same rules
    (a test case file): where each is written, or the file alone when it cannot be placed."""
    try:
        lines = next((t for _, _, t in documents(_read(path), str(path))), {})
    except (Refused, yaml.YAMLError, OSError, UnicodeDecodeError):
        lines = {}
    return _report(found, lines, path)


def _readable(exc: OSError | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "save the file as UTF-8 text"
    return "make it readable by the user the server runs as, or move it out of the folder"


def load_rules(folder: Path | str | None) -> RuleSet:
    return load_rules_with_sources(folder).rules
