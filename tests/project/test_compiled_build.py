"""The build the image ships: the engine's hot path, and the server's side of a review,
compiled with mypyc (setup.py).

`make test` runs the whole suite twice, against the sources and against that build
(GPU_ADMISSION_EXPECT_COMPILED=1, PYTHONPATH=build/compiled), so every golden, corpus and
property test also judges the compiled engine. These tests make sure each run really is
the build it claims to be.
"""

from __future__ import annotations

import ast
import importlib
import os
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES

import pytest

from tests.support.paths import ROOT
from webhook.engine.build import engine_build

EXPECT_COMPILED = os.environ.get("GPU_ADMISSION_EXPECT_COMPILED") == "1"
ENGINE_MODULES = (
    "webhook.engine.",
    "webhook.facts.",
    "webhook.quantity",
    "webhook.podrequest",
    "webhook.namepatterns",
)
# The server's side of a review: parsing, the review route, the response, the metrics, the
# decision log line.
SERVER_MODULES = (
    "webhook.server.http.protocol",
    "webhook.server.http.routes",
    "webhook.server.http.body",
    "webhook.server.stages",
    "webhook.server.metrics",
    "webhook.server.responses",
    "webhook.server.admission",
    "webhook.loglines",
)


def _setup_constant(name: str) -> object:
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
            name
        ]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup.py has no {name}")


COMPILED = _setup_constant("COMPILED")
assert isinstance(COMPILED, list)


def _module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def test_setup_names_only_engine_modules_that_exist() -> None:
    assert COMPILED, "nothing compiled"
    for path in COMPILED:  # type: ignore[attr-defined]
        assert (ROOT / path).is_file(), path
        # The engine, its facts, the pure helpers under it and the server's request path; no
        # pydantic (mypyc builds them without the project's pydantic plugin).
        module = _module(path)
        assert module.startswith(ENGINE_MODULES) or module in SERVER_MODULES, path
        assert "pydantic" not in (ROOT / path).read_text(), path


def test_setup_builds_with_the_mypy_the_build_extra_locks() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert _setup_constant("MYPY") in pyproject["project"]["optional-dependencies"]["build"]


def test_this_run_uses_the_build_it_expects() -> None:
    # An editable tree with stray compiled modules in it would run code other than its source.
    assert engine_build() == ("mypyc" if EXPECT_COMPILED else "python")


@pytest.mark.skipif(not EXPECT_COMPILED, reason="the compiled run checks this (make test)")
@pytest.mark.parametrize("path", COMPILED)
def test_every_listed_module_runs_compiled(path: str) -> None:
    module = importlib.import_module(_module(path))
    assert str(module.__file__).endswith(tuple(EXTENSION_SUFFIXES)), module.__file__
