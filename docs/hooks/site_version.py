"""The version in the site's header: the site's name is "gpu-admission <version>", the version
read from pyproject.toml when the site is built, so the header names the release the pages
describe and can never fall behind it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def version() -> str:
    match = re.search(r'^version = "([^"]+)"', PYPROJECT.read_text(encoding="utf-8"), re.M)
    if match is None:
        raise ValueError(f"{PYPROJECT}: no version line")
    return match[1]


def on_config(config: Any) -> Any:
    config["site_name"] = f"{config['site_name']} {version()}"
    return config
