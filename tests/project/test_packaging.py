"""Every third-party module the code imports is a declared dependency: an undeclared one works
only while something else happens to pull it in, and breaks the image the day it stops."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.paths import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower().replace("_", "-") for r in requirements}


def _imports(folder: Path) -> set[str]:
    """Top-level names of every absolute import under `folder`, local modules left out."""
    # the package, the tests (imported as `tests.<topic>...`), the benchmarks' own modules
    local = {p.stem for p in (ROOT / "bench").glob("*.py")} | {"webhook", "tests"}
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


def _locked(lock: str) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (pinned version, its hashes) of a pip-compile lock."""
    pins: dict[str, tuple[str, frozenset[str]]] = {}
    name = ""
    for line in (ROOT / lock).read_text().splitlines():
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if "==" in text and not text.startswith("--"):
            name, _, rest = text.partition("==")
            name = name.lower().replace("_", "-")
            pins[name] = (rest.split()[0].rstrip("\\").strip(), frozenset())
        elif text.startswith("--hash=") and name:
            version, hashes = pins[name]
            pins[name] = (version, hashes | {text.split()[0]})
    return pins


# What each lock must pin: the image installs requirements.lock (the runtime and what builds
# the project); `make run` and `make test` install requirements-dev.lock (that and the tests).
LOCKS = {
    "requirements.lock": ("build",),
    "requirements-dev.lock": ("build", "test"),
}


@pytest.mark.parametrize("lock,extras", LOCKS.items(), ids=LOCKS.keys())
def test_each_lock_pins_what_it_installs_within_pyproject_with_hashes(
    lock: str, extras: tuple[str, ...]
) -> None:
    """Installed with --require-hashes: every pin needs its hashes, and must agree with the
    ranges pyproject.toml declares (`make lock` regenerates both locks)."""
    pins = _locked(lock)
    wanted = PROJECT["dependencies"] + [
        spec for extra in extras for spec in PROJECT["optional-dependencies"][extra]
    ]
    for spec in wanted:
        requirement = Requirement(spec)
        if requirement.marker is not None and not requirement.marker.evaluate(
            {"sys_platform": "linux"}
        ):
            continue
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in {lock}: run `make lock`"
        version = pins[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (lock, name, version)
    assert all(hashes for _, hashes in pins.values()), f"every pin of {lock} needs its hashes"


def test_the_two_locks_agree_on_every_package_they_share() -> None:
    """The dev venv runs what the image runs: same versions, same hashes, nothing extra."""
    image, dev = _locked("requirements.lock"), _locked("requirements-dev.lock")
    assert set(image) <= set(dev), set(image) - set(dev)
    assert {name: dev[name] for name in image} == image
