"""The GitHub workflows and the composite action: every action pinned by commit, CI running the
whole gate (`make test`, the end-to-end suite included, with the Go the control plane needs),
and a release that takes its notes from the CHANGELOG, signs its image and attaches what it
says it does. actionlint (`make lint`) checks that they are valid workflows at all."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from packaging.version import Version

from tests.support.paths import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
CHANGELOG = ROOT / "CHANGELOG.md"

# owner/repo[/path]@<full commit SHA> # vX.Y.Z: a tag can be moved, a commit cannot, and the
# comment says which release the commit is (hardened-workflow guides, Dependabot's format).
PINNED = re.compile(
    r"^\s*(?:-\s+)?uses:\s+(?P<action>[\w.-]+/[\w.-]+(?:/[\w./-]+)?)@(?P<sha>[0-9a-f]{40})"
    r"\s+#\s+(?P<version>v\d+\.\d+\.\d+)\s*$"
)
USES = re.compile(r"^\s*(?:-\s+)?uses:\s")


def _load(path: Path) -> dict[Any, Any]:
    # PyYAML reads a bare `on:` key as True: normalise it back to "on".
    data: dict[Any, Any] = yaml.safe_load(path.read_text())
    if True in data:
        data["on"] = data.pop(True)
    return data


def _steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def _release_notes() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "release_notes", ROOT / "scripts" / "release_notes.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _action_files() -> list[Path]:
    return [*sorted(WORKFLOWS.glob("*.yml")), ROOT / "action.yml"]


# --- pinned actions ---------------------------------------------------------------------------


def test_every_action_is_pinned_by_commit_with_its_release_in_a_comment() -> None:
    seen = 0
    for path in _action_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not USES.match(line):
                continue
            seen += 1
            assert PINNED.match(line), (
                f"{path.relative_to(ROOT)}:{number}: {line.strip()!r} is not "
                "owner/repo@<40-hex commit> # vX.Y.Z"
            )
    assert seen >= 15  # ci, release, e2e and the composite action


def test_one_action_release_is_one_commit_everywhere() -> None:
    """The same action at the same release names the same commit in every file."""
    commits: dict[tuple[str, str], set[str]] = {}
    for path in _action_files():
        for line in path.read_text().splitlines():
            match = PINNED.match(line)
            if match:
                repository = "/".join(match["action"].split("/")[:2])
                commits.setdefault((repository, match["version"]), set()).add(match["sha"])
    assert commits
    for (action, version), shas in commits.items():
        assert len(shas) == 1, f"{action} {version}: {sorted(shas)}"


@pytest.mark.parametrize(
    "line",
    [
        "      - uses: actions/checkout@v7",
        "      - uses: actions/checkout@main # v7.0.1",
        "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1",
        "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b # v7.0.1",
        "      - uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7",
        "      uses: pypa/gh-action-pypi-publish@release/v1",
    ],
)
def test_the_pin_pattern_refuses_tags_branches_short_shas_and_missing_versions(line: str) -> None:
    assert USES.match(line) and not PINNED.match(line)


def test_the_pin_pattern_takes_an_action_in_a_subfolder() -> None:
    sha = "8aad20d150bbac5944a9f9d289da16a4b0d87c1e"
    line = f"      uses: github/codeql-action/upload-sarif@{sha} # v4.36.2"
    assert PINNED.match(line)


# --- CI -------------------------------------------------------------------------------------


def test_ci_runs_make_test_on_pull_requests_and_pushes() -> None:
    ci = _load(WORKFLOWS / "ci.yml")
    assert "pull_request" in ci["on"] and "push" in ci["on"]
    runs = [step.get("run", "") for step in _steps(ci)]
    assert any(line.strip() == "make test" for run in runs for line in run.splitlines())
    # The end-to-end suite fails rather than skips when its control plane cannot be built.
    assert ci["jobs"]["test"]["env"]["GPU_ADMISSION_E2E"] == "required"


def _go_directive(gomod: Path) -> Version:
    match = re.search(r"^go (\S+)$", gomod.read_text(), flags=re.M)
    assert match, gomod
    return Version(match[1])


def test_ci_installs_the_go_every_control_plane_module_asks_for() -> None:
    """The control plane is built with GOTOOLCHAIN=local: the Go set up must be at least the
    newest `go` line of tests/e2e/go/*/go.mod, or the build refuses that module."""
    ci = _load(WORKFLOWS / "ci.yml")
    setup = [s for s in _steps(ci) if s.get("uses", "").startswith("actions/setup-go@")]
    assert len(setup) == 1
    named = ROOT / setup[0]["with"]["go-version-file"]
    newest = max(_go_directive(p) for p in (ROOT / "tests/e2e/go").glob("*/go.mod"))
    assert _go_directive(named) == newest, f"{named.relative_to(ROOT)} is not the newest"


def test_ci_caches_the_control_plane_by_what_builds_it() -> None:
    ci = _load(WORKFLOWS / "ci.yml")
    cache = [s for s in _steps(ci) if s.get("uses", "").startswith("actions/cache@")]
    assert len(cache) == 1
    assert cache[0]["with"]["path"].startswith("~/.cache/gpu-admission")
    key = cache[0]["with"]["key"]
    for built_from in ("tests/e2e/go/**/go.mod", "tests/e2e/go/**/go.sum", "binaries.py"):
        assert built_from in key, built_from


def test_ci_runs_the_python_the_image_ships() -> None:
    ci = _load(WORKFLOWS / "ci.yml")
    image = ci["jobs"]["test"]["container"]
    shipped = re.search(r"^FROM python:(\d+\.\d+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert shipped and image.startswith(f"python:{shipped[1]}-"), image


# --- release ----------------------------------------------------------------------------------


def test_the_release_notes_come_from_the_changelog_section_of_the_tag() -> None:
    release = _load(WORKFLOWS / "release.yml")
    assert release["on"]["push"]["tags"] == ["v*"]
    runs = "\n".join(step.get("run", "") for step in _steps(release))
    assert 'scripts/release_notes.py "${VERSION}" > notes.md' in runs
    assert "--notes-file notes.md" in runs and "--generate-notes" not in runs
    # Checked before anything is built or pushed: a tag with no CHANGELOG section stops there.
    image_steps = release["jobs"]["image"]["steps"]
    first_build = next(i for i, s in enumerate(image_steps) if "docker/" in s.get("uses", ""))
    assert any("release_notes.py" in s.get("run", "") for s in image_steps[:first_build])


def test_the_release_signs_its_image_keyless_and_attaches_the_sbom_and_install_manifest() -> None:
    release = _load(WORKFLOWS / "release.yml")
    image = release["jobs"]["image"]
    assert image["permissions"]["id-token"] == "write"
    runs = "\n".join(step.get("run", "") for step in image["steps"])
    signed = [s for s in image["steps"] if "cosign sign" in s.get("run", "")]
    assert len(signed) == 1
    assert signed[0]["env"]["IMAGE"].endswith("@${{ steps.build.outputs.digest }}")
    assert "--key" not in runs  # keyless: the workflow's identity, no key to leak
    assert any(s.get("uses", "").startswith("sigstore/cosign-installer@") for s in image["steps"])
    publish = release["jobs"]["publish"]["steps"]
    create = next(s["run"] for s in publish if "gh release create" in s.get("run", ""))
    for asset in ("install.yaml", "*.spdx.json"):
        assert asset in create, asset


# --- release notes ----------------------------------------------------------------------------

EXAMPLE = """# Changelog

## [Unreleased]

### Added

### Changed
- something not released yet

## [0.2.0] - 2027-01-10

### Added
- `snapshot` writes a cluster's facts.

### Changed

### Fixed
- `audit` counts right.

## [0.1.0] - 2026-12-01

### Added
- The first release.
"""


def test_release_notes_are_the_version_section_without_its_empty_headings() -> None:
    notes = _release_notes().notes(EXAMPLE, "0.2.0")
    assert notes == (
        "### Added\n- `snapshot` writes a cluster's facts.\n\n### Fixed\n- `audit` counts right.\n"
    )
    assert _release_notes().notes(EXAMPLE, "0.1.0") == "### Added\n- The first release.\n"


@pytest.mark.parametrize("version", ["0.3.0", "0.2", "Unreleased-not"])
def test_a_version_the_changelog_does_not_have_is_refused(version: str) -> None:
    with pytest.raises(ValueError, match="no '## \\["):
        _release_notes().notes(EXAMPLE, version)


def test_a_section_that_lists_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="lists nothing"):
        _release_notes().notes("## [1.0.0]\n\n### Added\n\n### Fixed\n", "1.0.0")


def test_the_script_exits_1_with_one_line_for_a_missing_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text(EXAMPLE)
    module = _release_notes()
    assert module.main(["v0.2.0", str(changelog)]) == 0
    assert capsys.readouterr().out.startswith("### Added\n")
    assert module.main(["v9.9.9", str(changelog)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "## [9.9.9]" in err


# --- the CHANGELOG ----------------------------------------------------------------------------


def test_the_changelog_keeps_its_unreleased_section_ready_for_the_first_release() -> None:
    """Others add lines under these three headings; the release cut renames the section."""
    text = CHANGELOG.read_text()
    unreleased = _release_notes().section(text, "Unreleased")
    assert unreleased is not None
    headings = [line for line in unreleased if line.startswith("### ")]
    assert headings == ["### Added", "### Changed", "### Fixed"]
    # What a release cut from it would say: there is something to say.
    assert _release_notes().notes(text, "Unreleased").startswith("### Added\n- ")
    version = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version
    # Every released section is older than the version being worked on, or is it.
    for released in re.findall(r"^## \[(\d[^\]]*)\]", text, flags=re.M):
        assert Version(released) <= Version(version[1]), released
