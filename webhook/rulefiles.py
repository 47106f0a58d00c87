"""Load a rule folder into one validated `RuleSet`, or say exactly why it can't be loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from webhook.config import RuleSet

__all__ = ["RuleFileError", "load_rules", "rule_files"]


class RuleFileError(ValueError):
    """A rule folder that does not make a valid rule set; the message lists every problem."""


def rule_files(folder: Path) -> list[Path]:
    """The YAML files of a rule folder, in load order.

    ConfigMap mounts hold dot-prefixed timestamped folders beside the visible symlinks; only
    the visible names count.
    """
    return sorted(
        p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and not p.name.startswith(".")
    )


def load_rules(folder: Path | str) -> RuleSet:
    """Merge every YAML file of the folder: top-level keys and rule ids may appear once."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RuleFileError(f"{folder}: not a folder of rule files")
    merged: dict[str, Any] = {}
    origin: dict[str, Path] = {}
    problems: list[str] = []
    for path in rule_files(folder):
        try:
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        for doc in docs:
            if not isinstance(doc, dict):
                problems.append(
                    f"{path}: expected a mapping at the top, found {type(doc).__name__}"
                )
                continue
            for key, value in doc.items():
                if key == "rules" and isinstance(value, dict):
                    rules = merged.setdefault("rules", {})
                    for rule_id, cfg in value.items():
                        where = f"rules.{rule_id}"
                        if where in origin:
                            problems.append(f"{path}: {where} is already set in {origin[where]}")
                            continue
                        origin[where] = path
                        rules[rule_id] = cfg
                    continue
                if key in origin:
                    problems.append(f"{path}: {key} is already set in {origin[key]}")
                    continue
                origin[key] = path
                merged[key] = value
    if problems:
        raise RuleFileError("\n".join(problems))
    try:
        return RuleSet.model_validate(merged)
    except ValidationError as exc:
        lines = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in err["loc"])
            top = (
                "rules." + str(err["loc"][1])
                if err["loc"][:1] == ("rules",)
                else str(err["loc"][0])
            )
            lines.append(f"{origin.get(top, folder)}: {loc}: {err['msg']}")
        raise RuleFileError("\n".join(lines)) from None
