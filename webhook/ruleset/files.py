"""Load a rule folder into one validated `RuleSet`, or say exactly where and why it can't be.

Files are merged: each top-level key and each rule id may be set in one file only, and
`overrides` lists are concatenated in file order. Every error names the file, the line and
the field path, and for unknown fields lists what was expected.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from webhook.ruleset.models import RuleSet

__all__ = ["LoadedRules", "RuleFileError", "load_rules", "load_rules_with_sources", "rule_files"]

Path_ = tuple[str | int, ...]


class RuleFileError(ValueError):
    """A rule folder that does not make a valid rule set; the message lists every problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class LoadedRules:
    """A rule set and where each of its settings was written."""

    rules: RuleSet
    lines: dict[Path_, str] = field(default_factory=dict)  # field path -> "file:line"


def rule_files(folder: Path) -> list[Path]:
    """The YAML files of a rule folder, in load order.

    ConfigMap mounts hold dot-prefixed timestamped folders beside the visible symlinks; only
    the visible names count. Sub-folders (such as `tests/`) are not rule files.
    """
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file()
    )


def _record_lines(node: yaml.Node, path: Path_, where: str, out: dict[Path_, str]) -> None:
    out.setdefault(path, f"{where}:{node.start_mark.line + 1}")
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, str(key.value))
            out[child] = f"{where}:{key.start_mark.line + 1}"
            _record_lines(value, child, where, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _record_lines(item, (*path, i), where, out)


def _shift_overrides(lines: dict[Path_, str], offset: int) -> dict[Path_, str]:
    """Renumber a file's `overrides` items to their index in the concatenated list."""
    shifted: dict[Path_, str] = {}
    for path, where in lines.items():
        if len(path) >= 2 and path[0] == "overrides" and isinstance(path[1], int):
            path = ("overrides", path[1] + offset, *path[2:])
        shifted[path] = where
    return shifted


def _line_for(loc: Path_, lines: dict[Path_, str], fallback: str) -> str:
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return fallback


def _model_at(loc: Path_) -> type[BaseModel] | None:
    """The pydantic model that the field path `loc` points into, to say which keys it takes."""
    model: Any = RuleSet
    for seg in loc:
        if isinstance(model, type) and issubclass(model, BaseModel):
            found = next(
                (f for name, f in model.model_fields.items() if seg in (name, f.alias)), None
            )
            if found is None:
                return None
            model = found.annotation
        elif isinstance(seg, int) or typing.get_origin(model) in (list, dict):
            args = typing.get_args(model)
            model = args[-1] if args else None
        else:
            return None
        if typing.get_origin(model) in (typing.Union, types.UnionType):
            model = next((a for a in typing.get_args(model) if a is not type(None)), None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _explain(err: Any) -> str:
    loc: Path_ = tuple(err["loc"])
    text = ".".join(str(p) for p in loc) or "(top)"
    message = f"{text}: {err['msg']}"
    if err["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1])
        if parent is not None:
            keys = [f.alias or name for name, f in parent.model_fields.items()]
            message += f"; expected one of: {', '.join(keys)}"
    return message


def load_rules_with_sources(folder: Path | str) -> LoadedRules:
    """Merge every YAML file of the folder and validate the result as one rule set."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RuleFileError([f"{folder}: not a folder of rule files"])
    merged: dict[str, Any] = {}
    origin: dict[str, Path] = {}
    lines: dict[Path_, str] = {}
    problems: list[str] = []
    for path in rule_files(folder):
        try:
            text = path.read_text()
            docs = list(zip(yaml.safe_load_all(text), yaml.compose_all(text), strict=True))
        except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        for doc, node in docs:
            if doc is None:
                continue
            if not isinstance(doc, dict):
                problems.append(
                    f"{path}:{node.start_mark.line + 1}: expected a mapping at the top, "
                    f"found {type(doc).__name__}"
                )
                continue
            file_lines: dict[Path_, str] = {}
            _record_lines(node, (), str(path), file_lines)
            for key, value in doc.items():
                line = file_lines.get((key,), str(path))
                if key == "overrides" and isinstance(value, list):
                    offset = len(merged.setdefault("overrides", []))
                    merged["overrides"].extend(value)
                    file_lines = _shift_overrides(file_lines, offset)
                    continue
                if key == "rules" and isinstance(value, dict):
                    rules = merged.setdefault("rules", {})
                    for rule_id, cfg in value.items():
                        where = f"rules.{rule_id}"
                        if where in origin:
                            problems.append(
                                f"{file_lines.get(('rules', rule_id), path)}: {where} is "
                                f"already set in {origin[where]}"
                            )
                            continue
                        origin[where] = path
                        rules[rule_id] = cfg
                    continue
                if key in origin:
                    problems.append(f"{line}: {key} is already set in {origin[key]}")
                    continue
                origin[key] = path
                merged[key] = value
            for p, where in file_lines.items():
                lines.setdefault(p, where)
    if problems:
        raise RuleFileError(problems)
    try:
        return LoadedRules(RuleSet.model_validate(merged), lines)
    except ValidationError as exc:
        raise RuleFileError(
            [
                f"{_line_for(tuple(e['loc']), lines, str(folder))}: {_explain(e)}"
                for e in exc.errors(include_url=False)
            ]
        ) from None


def load_rules(folder: Path | str) -> RuleSet:
    return load_rules_with_sources(folder).rules
