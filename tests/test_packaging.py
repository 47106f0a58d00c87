"""Every third-party module the code imports is a declared dependency: an undeclared one works
only while something else happens to pull it in, and breaks the image the day it stops."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower().replace("_", "-") for r in requirements}


def _imports(folder: Path) -> set[str]:
    """Top-level names of every absolute import under `folder`, local modules left out."""
    local = {p.stem for d in ("tests", "bench") for p in (ROOT / d).glob("*.py")} | {"webhook"}
    found: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return {n for n in found if n not in sys.stdlib_module_names and n not in local}


def _undeclared(folder: Path, declared: set[str]) -> set[str]:
    owners = packages_distributions()
    missing = set()
    for module in _imports(folder):
        dists = {d.lower().replace("_", "-") for d in owners.get(module, [module])}
        if not dists & declared:
            missing.add(f"{module} ({', '.join(sorted(dists))})")
    return missing


def test_the_package_imports_only_its_declared_dependencies() -> None:
    assert _undeclared(ROOT / "webhook", _names(PROJECT["dependencies"])) == set()


def test_tests_and_benchmarks_import_only_declared_dependencies() -> None:
    declared = _names(PROJECT["dependencies"] + PROJECT["optional-dependencies"]["test"])
    for folder in ("tests", "bench"):
        assert _undeclared(ROOT / folder, declared) == set(), folder
