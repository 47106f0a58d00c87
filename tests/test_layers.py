"""The engine is pure: it imports no web server, API client, event loop or TLS.

That is what lets the webhook, the manifest audit and the live audit share it, and what lets
these tests exercise rules without fakes (kopf checks the same with an import contract).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE = ["webhook.engine", "webhook.checks", "webhook.podviews", "webhook.config", "webhook.audit"]
FORBIDDEN = ["aiohttp", "kubernetes", "asyncio", "ssl"]


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_io_machinery(module: str) -> None:
    probe = f"import sys, {module}; print(' '.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"{module} pulls in {result.stdout.strip()}"
