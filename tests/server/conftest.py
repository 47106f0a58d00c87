"""The server's topic: the listeners, the HTTP/1.1 they speak, the handlers, start-up and
shutdown. The rule set the in-process listeners serve is loaded once per module."""

from __future__ import annotations

import pytest

from tests.support.paths import ROOT
from webhook.server.reload import RuleHolder


@pytest.fixture(scope="module")
def holder() -> RuleHolder:
    """The shipped rules, loaded as `serve` loads them."""
    rules = RuleHolder(source=ROOT / "rules")
    assert rules.refresh()
    return rules
