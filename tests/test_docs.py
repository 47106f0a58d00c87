"""The README and the docs site: short README, every page reachable, every link resolving, the
rules reference generated whole, and the docs speaking of the product, not of its making."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
GENERATED = {"rules-reference.md", "cli.md"}  # made by docs/hooks at build time


def _reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "rules_reference", DOCS / "hooks" / "rules_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages(entries: list[Any]) -> list[str]:
    pages: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def _mkdocs() -> dict[str, Any]:
    # mkdocs.yml holds no custom YAML tags, so the safe loader reads it.
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return config


def _links(markdown: str) -> list[str]:
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", text)


# --- the README ------------------------------------------------------------------------------


def test_the_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 300


def test_the_two_commands_are_exactly_make_run_and_make_test() -> None:
    section = README.read_text().split("## The two commands\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert [c for c in commands if c] == ["make run", "make test"]


def test_the_readme_installs_in_three_commands_and_shows_the_report() -> None:
    text = README.read_text()
    install = text.split("## Install in a cluster\n", 1)[1].split("```\n", 2)[1]
    commands = [line for line in install.splitlines() if line.startswith("kubectl ")]
    assert len(commands) == 3
    assert "kubectl apply -k manifests/overlays/cert-manager" in commands[0]
    assert "](docs/audit-report.png)" in text
    assert "| `gpu-quota` |" in text  # the rule table


def test_every_link_of_the_readme_resolves() -> None:
    for link in _links(README.read_text()):
        if link.startswith(("http://", "https://", "#")):
            continue
        assert (ROOT / link.split("#", 1)[0]).exists(), link


# --- the site --------------------------------------------------------------------------------


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    nav = _nav_pages(_mkdocs()["nav"])
    on_disk = {p.name for p in DOCS.glob("*.md")}
    assert len(nav) == len(set(nav))
    assert set(nav) == on_disk | GENERATED
    assert not GENERATED & on_disk, "generated pages are not kept in docs/"


def test_the_site_builds_offline_and_strict(tmp_path: Path) -> None:
    config = _mkdocs()
    assert config["theme"]["font"] is False  # no web fonts fetched when the site is built
    assert config.get("strict") is True
    assert "plugins" not in config or not {"social", "privacy"} & set(
        str(p) if isinstance(p, str) else next(iter(p)) for p in config["plugins"]
    )
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    page = (site / "rules-reference" / "index.html").read_text()
    assert "gpu-whole-quantity" in page and "maxStalenessSeconds" in page
    for html in site.rglob("*.html"):
        assert "fonts.googleapis.com" not in html.read_text(), html


def test_the_rules_reference_covers_every_rule_field_and_built_in_list() -> None:
    from webhook.audit.ruledocs import rule_doc
    from webhook.ruleset.components import COMPONENTS
    from webhook.ruleset.defaults import DEFAULT_EXEMPT_NAMESPACES, DEFAULT_GPU_RESOURCES
    from webhook.ruleset.hostpaths import HOST_PATHS, VENDOR_PATHS

    schema = json.loads((ROOT / "schema" / "rules.schema.json").read_text())
    page = _reference().render(schema)
    rules = schema["$defs"]["RuleSettings"]["properties"]
    for rule_id in rules:
        assert f"### `{rule_id}`" in page, rule_id
        assert rule_doc(rule_id).help in page, rule_id
    top = page.split("\n## Rules\n", 1)[0]
    for key in schema["properties"]:
        assert f"| `{key}` |" in top, key
    # Each section's table holds every field of what it documents: a rule's settings under
    # the rule's heading, every other definition under its own.
    sections = {s.split("\n", 1)[0]: s for s in re.split(r"\n### ", page)[1:]}
    defs = schema["$defs"]
    for rule_id, prop in rules.items():
        for field in defs[prop["$ref"].rsplit("/", 1)[-1]].get("properties", {}):
            assert f"| `{field}` |" in sections[f"`{rule_id}`"], f"{rule_id}.{field}"
    rule_defs = {p["$ref"].rsplit("/", 1)[-1] for p in rules.values()}
    for name, definition in defs.items():
        if name == "RuleSettings" or name in rule_defs:
            continue
        for field in definition.get("properties", {}):
            assert f"| `{field}` |" in sections[name], f"{name}.{field}"
    for name in DEFAULT_GPU_RESOURCES:
        assert f"- `{name}`" in page, name
    exemptions = page.split("### Built-in exemptions", 1)[1].split("\n### ", 1)[0]
    for name in DEFAULT_EXEMPT_NAMESPACES:
        assert f"`{name}`" in exemptions, name
    for c in COMPONENTS:
        for own in (*c.accounts, *c.daemonsets):
            assert f"`{own}`" in exemptions, own
    for row in (*HOST_PATHS, *(r for _, rows in VENDOR_PATHS for r in rows)):
        assert f"`{row.pattern}` |" in page, row.pattern


def test_the_rules_reference_follows_the_schema_it_is_given() -> None:
    """Generated, not kept by hand: a field added to the schema appears on the page."""
    schema = json.loads((ROOT / "schema" / "rules.schema.json").read_text())
    schema["$defs"]["ShmRule"]["properties"]["extraSetting"] = {
        "type": "integer",
        "default": 3,
        "minimum": 1,
        "description": "A setting only this test knows.",
    }
    page = _reference().render(schema)
    assert "| `extraSetting` | integer | `3` | A setting only this test knows. (≥ 1) |" in page


def test_the_shipped_rule_file_documents_every_rule_the_reference_shows() -> None:
    reference = _reference()
    schema = json.loads((ROOT / "schema" / "rules.schema.json").read_text())
    rules = schema["$defs"]["RuleSettings"]["properties"]
    known = {*schema["properties"], *(f"rules.{rule}" for rule in rules)}
    blocks = reference.shipped_blocks((ROOT / "rules" / "gpu-admission.yaml").read_text(), known)
    assert {f"rules.{rule}" for rule in rules} <= set(blocks)
    for name, lines in blocks.items():
        yaml.safe_load("\n".join(lines))  # shown as YAML: it must be YAML
        assert name.removeprefix("rules.") in "\n".join(lines)


def test_every_relative_link_in_the_docs_resolves() -> None:
    pages = {p.name for p in DOCS.glob("*.md")} | GENERATED
    for page in DOCS.glob("*.md"):
        for link in _links(page.read_text()):
            if link.startswith(("http://", "https://", "#")):
                continue
            target = link.split("#", 1)[0]
            assert target in pages or (DOCS / target).is_file(), f"{page.name}: {link}"


# Commands a reader copies from the docs, and the repository paths they name.
_COMMAND = re.compile(
    r"^\s*(?:\$ )?(?:\S+=\S+ )?(?:kubectl|\.venv/bin/gpu-admission|gpu-admission|make|kind|curl)\b"
)
_REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:examples|manifests|dist|rules|tests|schema|bench)/[\w./*-]*[\w*])"
)


def test_every_repository_path_a_documented_command_names_exists() -> None:
    """A stranger copies the commands of the README and the pages in order: every example,
    manifest and rule folder they name is in the repository (a glob matches something)."""
    named = 0
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), flags=re.S):
            for line in block.splitlines():
                if not _COMMAND.match(line):
                    continue
                for path in _REPO_PATH.findall(line.split(" #", 1)[0]):
                    named += 1
                    assert list(ROOT.glob(path)), f"{page.name}: {path} ({line.strip()})"
    assert named > 20  # the install, try-it and rules pages name plenty


# --- product language ------------------------------------------------------------------------

WORK_LOG = re.compile(
    r"\bsession\b|\bissue \d|\bissue's\b|\bthe issue\b|\bpass of\b|\bspeed pass\b|"
    r"\bthis round\b|\bfourth pass\b|\bthird pass\b",
    re.I,
)


def _comments(path: Path) -> str:
    text = path.read_text()
    return "\n".join(re.findall(r"#.*$|\"\"\"[\s\S]*?\"\"\"", text, flags=re.M))


@pytest.mark.parametrize(
    "paths",
    [
        pytest.param(lambda: [README, ROOT / "CHANGELOG.md"], id="readme-changelog"),
        pytest.param(lambda: sorted(DOCS.glob("*.md")), id="docs"),
        pytest.param(lambda: sorted((ROOT / "manifests").rglob("*.md")), id="manifests"),
    ],
)
def test_the_docs_speak_of_the_product_not_of_its_making(paths: Any) -> None:
    for path in paths():
        found = WORK_LOG.findall(path.read_text())
        assert not found, f"{path.relative_to(ROOT)}: {found}"


def test_code_comments_speak_of_the_product() -> None:
    for path in sorted((ROOT / "webhook").rglob("*.py")):
        found = WORK_LOG.findall(_comments(path))
        assert not found, f"{path.relative_to(ROOT)}: {found}"


def test_the_work_log_pattern_catches_what_it_is_for() -> None:
    for sentence in ("in this session", "Against issue 12's targets", "The third speed pass:"):
        assert WORK_LOG.search(sentence), sentence
    for sentence in ("cert-manager issues the certificate", "aiohttp.ClientSession", "passes"):
        assert not WORK_LOG.search(sentence), sentence


def test_every_rule_file_example_in_the_docs_loads(tmp_path: Path) -> None:
    """A YAML block whose top-level keys are all rule-file keys is a rule file: it must load."""
    from webhook.ruleset.files import load_rules

    keys = set(json.loads((ROOT / "schema" / "rules.schema.json").read_text())["properties"])
    checked = 0
    for page in sorted(DOCS.glob("*.md")):
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)):
            doc = yaml.safe_load(block)
            if not isinstance(doc, dict) or not set(doc) <= keys:
                continue
            folder = tmp_path / f"{page.stem}-{i}"
            folder.mkdir()
            (folder / "example.yaml").write_text(block)
            load_rules(folder)
            checked += 1
    assert checked >= 3  # writing rules, workloads, budgets
