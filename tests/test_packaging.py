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


def _locked() -> dict[str, tuple[str, int]]:
    """name -> (pinned version, number of hashes) of requirements.lock."""
    pins: dict[str, tuple[str, int]] = {}
    name = ""
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if "==" in text and not text.startswith("--"):
            name, _, rest = text.partition("==")
            name = name.lower().replace("_", "-")
            pins[name] = (rest.split()[0].rstrip("\\").strip(), 0)
        elif text.startswith("--hash=") and name:
            version, hashes = pins[name]
            pins[name] = (version, hashes + 1)
    return pins


def test_the_lock_pins_every_runtime_dependency_within_pyproject_with_hashes() -> None:
    """The image installs requirements.lock with --require-hashes: it must agree with the
    ranges pyproject.toml declares (regenerate it with the command in the README)."""
    pins = _locked()
    for spec in PROJECT["dependencies"]:
        requirement = Requirement(spec)
        if requirement.marker is not None and not requirement.marker.evaluate(
            {"sys_platform": "linux"}
        ):
            continue
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in requirements.lock"
        version = pins[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (name, version)
    assert all(hashes >= 1 for _, hashes in pins.values()), "every pin needs its hashes"
    for spec in PROJECT["optional-dependencies"]["build"]:  # what builds the project, too
        requirement = Requirement(spec)
        assert requirement.specifier.contains(pins[requirement.name][0]), spec
