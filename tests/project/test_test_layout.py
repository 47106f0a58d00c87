"""The tests' own layout: each test file in a topic folder, and no test module importing another
test module or a conftest. What tests share is a fixture (a conftest) or a helper in
tests/support/; a test module imported for its helpers would run its tests a second time under
another name, and ties one topic's tests to another's.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import ROOT

TESTS = ROOT / "tests"
# Folders of data, not modules: golden cases, the control plane's Go modules.
DATA = {"golden", "go"}


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if not DATA & set(p.relative_to(TESTS).parts[:-1]))


def _imported(source: str, path: Path) -> list[str]:
    """Every module `source` (the text of the module at `path`) imports, by its dotted name,
    relative imports resolved; `from a import b` counts as both `a` and `a.b`."""
    package = ".".join(path.relative_to(ROOT).parts[:-1])
    names: list[str] = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]
    return names


def _is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last == "conftest" or last.startswith("test_")


def test_no_test_module_imports_another_test_module_or_a_conftest() -> None:
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _modules()
        for name in _imported(path.read_text(), path)
        if _is_test_module(name)
    ]
    assert not found, (
        "share a helper through tests/support/ or a fixture through a conftest instead:\n"
        + "\n".join(found)
    )


def test_every_test_file_is_in_a_topic_folder_that_is_a_package() -> None:
    flat = [p.name for p in TESTS.glob("test_*.py")]
    assert not flat, f"move these into a topic folder of tests/ (engine, server, ...): {flat}"
    folders = {p.parent for p in _modules() if p.name.startswith("test_")}
    not_packages = [str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").exists()]
    assert not not_packages, (
        f"add an __init__.py (modules are named tests.<topic>...): {not_packages}"
    )


def test_the_check_sees_each_way_of_importing_a_test_module() -> None:
    """The scan above would pass on a suite it cannot read: it must see every form."""
    forms = {
        "from conftest import ROOT": True,
        "import tests.engine.test_golden": True,
        "from tests.engine.test_golden import load_case": True,
        "from tests.engine import test_golden": True,
        "from . import test_golden": True,
        "from .conftest import holder": True,
        "from tests.support.paths import ROOT": False,
        "import testing_helpers": False,
    }
    probe = TESTS / "engine" / "probe.py"  # read as if it stood there; never written
    for line, expected in forms.items():
        names = _imported(line, probe)
        assert any(_is_test_module(n) for n in names) is expected, (line, names)
