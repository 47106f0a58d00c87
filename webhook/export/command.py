"""`gpu-admission export`: write the native policies for the rule set in force.

Without `--out` the YAML goes to stdout; with it, to `<out>/policies.yaml` (with
`--webhook-only`, the companion rule file `<out>/zz-native.yaml` instead). Each rule left to
the webhook is said on stderr, one line each, and in the output's header.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TextIO

from webhook.engine.compiled import compile_rules
from webhook.export.bundle import build
from webhook.export.companion import COMPANION_FILE
from webhook.export.companion import webhook_only as companion
from webhook.export.render import describe, render, summary
from webhook.ruleset.files import RuleFileError, load_rules

__all__ = ["MIN_KUBERNETES", "OUT_FILE", "export", "kubernetes_version"]

OUT_FILE = "policies.yaml"
# The oldest release anything is exported for: 1.34 gets the ResourceQuotas (DRA device-class
# quotas need resource.k8s.io/v1); the policies need 1.35 (export/bundle.py, VALIDATING_SINCE).
MIN_KUBERNETES = (1, 34)


def kubernetes_version(text: str) -> tuple[int, int]:
    """'1.36' -> (1, 36); a ValueError for anything else or anything too old."""
    match = re.fullmatch(r"1\.(\d+)", text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes minor version such as 1.36")
    version = (1, int(match[1]))
    if version < MIN_KUBERNETES:
        raise ValueError(
            f"Kubernetes {text}: the export needs 1.{MIN_KUBERNETES[1]} or later "
            "(the policies 1.35, for the CEL lists extension they use)"
        )
    return version


def export(
    folder: Path | None,
    kubernetes: str,
    out_dir: Path | None,
    stdout: TextIO,
    stderr: TextIO,
    *,
    webhook_only: bool = False,
    one_line: bool = False,
) -> int:
    """0 when written; 2 for a rule or argument error (said on stderr). `webhook_only`: the
    companion rule file instead of the policies; `one_line`: a line per object instead."""
    try:
        version = kubernetes_version(kubernetes)
        rules = compile_rules(load_rules(folder))
    except (ValueError, RuleFileError) as exc:
        print(f"gpu-admission export: {exc}", file=stderr)
        return 2
    result = build(rules, version)
    command = f"gpu-admission export --rules {folder or '(built-in defaults)'}"
    command += f" --kubernetes {kubernetes}" + (" --webhook-only" if webhook_only else "")
    if one_line:
        text, name = summary(result), OUT_FILE
        out_dir = None  # a summary to read, never a file to apply
    elif webhook_only:
        text, name = companion(result, command), COMPANION_FILE
    else:
        text, name = render(result, kubernetes, command), OUT_FILE
    for item in result.left_out:
        print(f"left to the webhook: {describe(item)}", file=stderr)
    if out_dir is None:
        stdout.write(text)
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / name).write_text(text)
        print(f"wrote {out_dir / name}", file=stderr)
    return 0
