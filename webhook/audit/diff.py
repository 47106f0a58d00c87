"""The change the webhook would make to an object, as a YAML diff: the table and the page
both show it."""

from __future__ import annotations

import difflib
import re
from typing import Any

import yaml

from webhook.audit.locations import locate_segments, pointer_segments
from webhook.audit.run import AuditResult

__all__ = ["patch_diff"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def patch_diff(r: AuditResult) -> list[str]:
    """The change the webhook would make, as a YAML diff of the object (context 1 line).

    The diff is of the object as YAML writes it, which need not be as the file has it (flow
    style, comments, key order), so a hunk is headed by where its change lands in the file,
    `@@ file:line @@`, rather than by line numbers of that rewrite. Objects read from no
    file keep the rewrite's own numbers.
    """
    if not r.patch:
        return []
    before_text = yaml.safe_dump(r.original, sort_keys=False)
    after_text = yaml.safe_dump(r.mutated, sort_keys=False)
    lines = difflib.unified_diff(
        before_text.splitlines(), after_text.splitlines(), n=1, lineterm=""
    )
    body = [line for line in lines if not line.startswith(("---", "+++"))]
    if len(r.patch_locations) != len(r.patch):
        return body
    landing = _op_lines(r.patch, before_text, after_text)
    for i, line in enumerate(body):
        hunk = _HUNK.match(line)
        if hunk is None:
            continue
        old_start, old_len = int(hunk[1]), int(hunk[2] or 1)
        new_start, new_len = int(hunk[3]), int(hunk[4] or 1)
        for (side, at), where in zip(landing, r.patch_locations, strict=True):
            start, length = (new_start, new_len) if side == "new" else (old_start, old_len)
            if where is not None and at is not None and start <= at < start + max(length, 1):
                body[i] = f"@@ {where.file}:{where.line} @@"
                break
    return body


def _op_lines(
    patch: list[dict[str, Any]], before_text: str, after_text: str
) -> list[tuple[str, int | None]]:
    """For each operation, the side of the diff it shows on and its 1-based line there: a
    removal in the old text, anything else in the new."""
    load = yaml.SafeLoader
    trees = {"old": yaml.compose(before_text, load), "new": yaml.compose(after_text, load)}
    out: list[tuple[str, int | None]] = []
    for op in patch:
        side = "old" if op.get("op") == "remove" else "new"
        tree = trees[side]
        at = None
        if tree is not None:
            at = locate_segments(tree, pointer_segments(str(op.get("path", ""))), "").line
        out.append((side, at))
    return out
