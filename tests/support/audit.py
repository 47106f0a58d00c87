"""The audit as a user runs it: the command in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT


def run_audit(
    *args: str, stdin: str | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "audit", "--rules", str(ROOT / "rules"), *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=cwd,
        timeout=120,
    )
