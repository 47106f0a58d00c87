"""No import cycles anywhere in the package: every module can be read, tested and compiled
(mypyc) on top of what it imports, and the layers of the import contract mean what they say.

The graph is the one `lint-imports` builds (grimp), imports made only for type checking and
imports inside functions included: each is a dependency all the same.
"""

from __future__ import annotations

import grimp

PACKAGE = "webhook"


def _cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """For each module on a cycle, one shortest cycle through it (deduplicated)."""
    found: set[tuple[str, ...]] = set()
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycle = (module, *back)
                start = cycle.index(min(cycle[:-1]))
                found.add(cycle[start:-1] + cycle[:start] + (cycle[start],))
    return sorted(found)


def test_the_package_has_no_import_cycle() -> None:
    cycles = _cycles(grimp.build_graph(PACKAGE))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_a_cycle_is_found(tmp_path, monkeypatch) -> None:
    """The check sees a cycle when there is one, through a type-checking import too."""
    pkg = tmp_path / "cyclic"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyclic import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyclic import a\n"
    )
    (pkg / "c.py").write_text("from cyclic import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cycles = _cycles(grimp.build_graph("cyclic", cache_dir=None))
    assert cycles == [("cyclic.a", "cyclic.b", "cyclic.a")]
