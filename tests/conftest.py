"""Fixtures every topic uses: certificates, the server with the shipped rules (or with a test's
own), and the fake API server. Helpers to import live in tests/support/."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import CORPUS, ROOT
from tests.support.webhook import Webhook, start_webhook, stop_webhook


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "certs",
            "generate",
            "--out",
            str(out),
            "--hosts",
            "localhost,127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="session")
def webhook(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """The server with the shipped default rules, shared by most tests."""
    hook = start_webhook(certs, ROOT / "rules", tmp_path_factory.mktemp("log") / "server.log")
    yield hook
    stop_webhook(hook)


@pytest.fixture
def webhook_with(certs: Path, tmp_path: Path) -> Iterator[Any]:
    """Start a server: the default rules, `rule_settings` merged into `rules:`, `top` set on top."""
    started: list[Webhook] = []

    def start(rule_settings: dict[str, Any], *, args: tuple[str, ...] = (), **top: Any) -> Webhook:
        folder = tmp_path / f"rules{len(started)}"
        folder.mkdir()
        # The defaults are built in: a rule file names only what it changes.
        base: dict[str, Any] = {"rules": dict(rule_settings), **top}
        (folder / "rules.yaml").write_text(yaml.safe_dump(base))
        hook = start_webhook(certs, folder, tmp_path / f"server{len(started)}.log", *args)
        started.append(hook)
        return hook

    yield start
    for hook in started:
        stop_webhook(hook)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say it in one line when the corpus was not there: each of those skips stands for the
    hundreds of real manifests and AdmissionReviews the corpus tests run one by one."""
    skipped = [
        r
        for r in terminalreporter.stats.get("skipped", [])
        if "corpus" in str(getattr(r, "longrepr", "")) and "absent" in str(r.longrepr)
    ]
    if skipped:
        terminalreporter.write_line(
            f"NOTE: {len(skipped)} corpus tests did not run: {CORPUS} is absent. With ../shared "
            "beside this clone they check every real manifest and AdmissionReview in it "
            "(several hundred cases).",
            yellow=True,
            bold=True,
        )


# ---- a protocol-speaking API server for list/watch code (tests/support/fake_apiserver.py) ---


@pytest.fixture
def server() -> Iterator[Any]:
    """An empty fake API server; a module that needs it seeded defines its own `server`."""
    from tests.support.fake_apiserver import FakeApiServer

    srv = FakeApiServer()
    srv.start()
    yield srv
    srv.stop()
