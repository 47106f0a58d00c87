"""The change the webhook would make to an object, as a YAML diff: the table and the page
both show it."""

from __future__ import annotations

import difflib

import yaml

from webhook.audit.run import AuditResult

__all__ = ["patch_diff"]


def patch_diff(r: AuditResult) -> list[str]:
    """The change the webhook would make, as a YAML diff of the object (context 1 line)."""
    if not r.patch:
        return []
    before = yaml.safe_dump(r.original, sort_keys=False).splitlines()
    after = yaml.safe_dump(r.mutated, sort_keys=False).splitlines()
    lines = difflib.unified_diff(before, after, n=1, lineterm="")
    return [line for line in lines if not line.startswith(("---", "+++"))]
