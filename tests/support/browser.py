"""Headless Chromium for the tests that look at a page as a reader would (the audit's HTML
report, the docs site): skipped where the browser is missing, except in CI, where it fails."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (make test installs the test extra)"
    for exe in ("chromium", "chromedriver"):
        if shutil.which(exe) is None:
            return f"{exe} is not on PATH: run `make test-packages`"
    return None


def headless_chromium(width: int, height: int, console: bool = False) -> Any:
    """A Chromium WebDriver with a window of this size; `console`: keep the page's console log
    (`driver.get_log("browser")`). The caller quits it."""
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests, but {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument(f"--window-size={width},{height}")
    if console:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(str(shutil.which("chromedriver"))))
