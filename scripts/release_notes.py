"""The notes of a GitHub release: the CHANGELOG.md section of its version, as written.

    python3 scripts/release_notes.py 0.1.0 [CHANGELOG.md]

Prints the body of `## [0.1.0]` (its `### Added` / `### Changed` / `### Fixed` lists, empty
ones left out) and exits 0; exits 1 with one line on stderr when the CHANGELOG has no such
section or it lists nothing, so a tag whose version was never written up is not released.
The release workflow runs it before anything is built. Standard library only: it runs on the
runner's own Python.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_VERSION_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\]")


def section(changelog: str, version: str) -> list[str] | None:
    """The lines under `## [version]` up to the next `## ` heading, or None without one."""
    lines: list[str] | None = None
    for line in changelog.splitlines():
        if line.startswith("## "):
            if lines is not None:
                break
            match = _VERSION_HEADING.match(line)
            if match and match["version"] == version:
                lines = []
            continue
        if lines is not None:
            lines.append(line)
    return lines


def without_empty_headings(lines: list[str]) -> list[str]:
    """A `### ` heading with no entry under it says nothing in a release's notes."""
    kept: list[str] = []
    pending: list[str] = []
    for line in lines:
        if line.startswith("### "):
            pending = [line]
        elif pending and not line.strip():
            pending.append(line)
        else:
            kept += pending
            pending = []
            kept.append(line)
    return kept


def notes(changelog: str, version: str) -> str:
    """The release notes of version, or ValueError saying why there are none."""
    found = section(changelog, version)
    if found is None:
        raise ValueError(f"CHANGELOG.md has no '## [{version}]' section: write it before tagging")
    body = "\n".join(without_empty_headings(found)).strip()
    if not any(line.lstrip().startswith("- ") for line in body.splitlines()):
        raise ValueError(f"CHANGELOG.md's '## [{version}]' section lists nothing")
    return body + "\n"


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: release_notes.py VERSION [CHANGELOG.md]", file=sys.stderr)
        return 2
    path = Path(argv[1] if len(argv) == 2 else "CHANGELOG.md")
    try:
        sys.stdout.write(notes(path.read_text(encoding="utf-8"), argv[0].removeprefix("v")))
    except (OSError, ValueError) as error:
        print(f"release_notes: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
