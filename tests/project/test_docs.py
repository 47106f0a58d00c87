"""The README and the docs site: short README, every page reachable, every link resolving, the
rules reference generated whole, and the docs speaking of the product, not of its making."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT

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


def _image() -> str:
    """The image `make image` builds by default: the name the manifests run, and the version."""
    makefile = (ROOT / "Makefile").read_text()
    name = re.search(r"^IMAGE\s*\?=\s*(\S+)$", makefile, flags=re.M)
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert name and version
    return f"{name[1]}:{version[1]}"


def test_the_readme_installs_from_the_clone_in_five_commands_and_shows_the_report() -> None:
    """No release is needed: the image is built, loaded onto kind (the very name and tag the
    manifests run), then three kubectl commands install and show a GPU pod as admitted."""
    text = README.read_text()
    install = text.split("## Install in a cluster\n", 1)[1].split("```\n", 2)[1]
    commands = [line.split(" #", 1)[0].strip() for line in install.splitlines()]
    assert commands[0] == "make image"
    assert commands[1] == f"kind load docker-image {_image()}"
    deployment = (ROOT / "manifests" / "base" / "deployment.yaml").read_text()
    assert f"image: {_image()}\n" in deployment
    assert [c for c in commands[2:] if c.startswith("kubectl ")] == commands[2:]
    assert len(commands) == 5
    assert commands[2] == "kubectl apply -k manifests/overlays/cert-manager"
    assert "`pipx install .`" in text and "`pip install .`" in text
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


# The pages a newcomer copies command by command, in order, from a fresh clone: every file a
# command reads is in the repository or was made by a command before it.
_WALKTHROUGHS = ("quickstart.md", "install.md", "try-locally.md")
_TOOLS = {"kubectl", "gpu-admission", ".venv/bin/gpu-admission", "kind", "curl", "make"}
_READS = {"-f", "-k", "--file", "--cluster-snapshot", "--rules", "--ca", "--old", "--cacert"}
_MAKES = {"--out", ">"}
_MADE_BY = {("make", "run"): "certs", ("make", "certs"): "certs"}
_WRITTEN = "\0written: "
_LOOKS_LIKE_A_FILE = re.compile(r"^[\w.-]*/[\w./*-]*$|^[\w./-]+\.(?:ya?ml|json|crt|key|html)$")


def _shell_lines(markdown: str) -> list[str]:
    """The commands of a page: lines of its shell blocks (continuations joined), and inline
    code spans that start with a tool."""
    lines: list[str] = []
    for language, block in re.findall(r"^ *```(\w*)\n(.*?)^ *```", markdown, flags=re.S | re.M):
        written = re.match(r"# ([\w.-]+/[\w./-]+)\n", block)
        if language == "yaml" and written:  # a file the reader writes: "# folder/file.yaml"
            lines.append(f"{_WRITTEN}{written[1]}")
        if language not in ("", "bash", "sh", "console"):
            continue
        lines += re.sub(r"\\\n\s*", " ", block).splitlines()
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    lines += [span for span in re.findall(r"`([^`]+)`", prose) if span.split(" ")[0] in _TOOLS]
    return lines


def _files_read(line: str, made: set[str]) -> list[str]:
    """The files one line's commands read that no earlier command made; adds what it makes."""
    if line.startswith(_WRITTEN):
        path = line.removeprefix(_WRITTEN)
        made.update((path, path.rsplit("/", 1)[0]))
        return []
    line = line.strip().removeprefix("$ ").split(" #", 1)[0]
    if not line or line.startswith("#"):
        return []
    read: list[str] = []
    for command in re.split(r"\s(?:\||&&|;)\s", line):
        words = shlex.split(command)
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words = words[1:]  # VAR=value prefixes
        if not words or words[0] not in _TOOLS:
            continue
        if tuple(words[:2]) in _MADE_BY:
            made.add(_MADE_BY[(words[0], words[1])])
        for before, word in itertools.pairwise(words):
            if before in _MAKES:
                made.add(word.rstrip("/"))
                continue
            path = word.removeprefix("@") if words[0] == "curl" else word
            reads = before in _READS or (
                words[0].endswith("gpu-admission")
                and not word.startswith("-")
                and _LOOKS_LIKE_A_FILE.match(word)
            )
            if before in _READS and "=" in path:
                reads = False
            if word.startswith("@"):
                reads = True
            if reads and not path.startswith(("http://", "https://")):
                read.append(path)
    return [p for p in read if not any(p == m or p.startswith(m + "/") for m in made)]


@pytest.mark.parametrize(
    "page", [README, *(DOCS / name for name in _WALKTHROUGHS)], ids=lambda p: p.name
)
def test_every_file_a_command_reads_exists(page: Path) -> None:
    made: set[str] = set()
    missing: list[str] = []
    checked = 0
    for line in _shell_lines(page.read_text()):
        for path in _files_read(line, made):
            checked += 1
            if not list(ROOT.glob(path.rstrip("/"))):
                missing.append(f"{path} ({line.strip()})")
    assert not missing, f"{page.name}: {missing}"
    assert checked >= 3, page.name


def test_the_file_check_sees_what_it_is_for() -> None:
    """A folder that is not in the repository, given to audit, is reported; an output written
    by one command and read by the next is not."""
    made: set[str] = set()
    assert _files_read("gpu-admission audit k8s/ --cluster-snapshot x.yaml", made) == [
        "k8s/",
        "x.yaml",
    ]
    assert _files_read("gpu-admission review pod.yaml > review.json", made) == ["pod.yaml"]
    assert _files_read('curl -s "https://h/mutate" -d @review.json | jq .', made) == []
    assert _files_read("gpu-admission certs generate --out certs", made) == []
    assert _files_read("kubectl create secret tls t --cert=certs/tls.crt", made) == []
    assert _files_read("kubectl apply -k manifests/overlays/x  # comment", made) == [
        "manifests/overlays/x"
    ]
    written = "```yaml\n# my-install/kustomization.yaml\nresources: []\n```\n"
    apply = "```\nkubectl apply -k my-install\n```\n"
    for page, expected in ((written + apply, []), (apply, ["my-install"])):
        made = set()
        assert [p for line in _shell_lines(page) for p in _files_read(line, made)] == expected


# Until a version is released (a "## [x.y.z]" section in CHANGELOG.md), nothing is published:
# no page may show pulling an image, installing a wheel or a chart, or downloading a release
# asset as a command that works, and the install pages say the image is built from the clone.
_FETCHES_A_RELEASE = re.compile(
    r"\b(?:docker|podman|nerdctl|crane) (?:image )?pull\b|\bctr (?:images? )?pull\b"
    r"|\bpipx? install (?!\.(?:\s|$))\S*(?:gpu-admission|\.whl)"
    r"|releases/download/|\bhelm (?:install|upgrade)\b|\bcosign verify\b"
)
_NOT_YET = "No release has been published yet"


def _released_versions() -> list[str]:
    return re.findall(r"^## \[(\d[^\]]*)\]", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)


def test_nothing_unreleased_is_shown_as_published() -> None:
    released = _released_versions()
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        text = page.read_text()
        fetches = [line for line in _shell_lines(text) if _FETCHES_A_RELEASE.search(line)]
        if not released:
            assert not fetches, f"{page.name}: {fetches}"
        else:
            assert _NOT_YET not in text, f"{page.name}: {released[0]} is released"
    if not released:
        for page in (README, DOCS / "install.md", DOCS / "quickstart.md", DOCS / "index.md"):
            assert _NOT_YET in page.read_text(), page.name


@pytest.mark.parametrize(
    "line",
    [
        "docker pull ghcr.io/gpu-admission/gpu-admission:0.1.0",
        "pip install gpu-admission",
        "pipx install gpu-admission==0.1.0",
        "pip install gpu-admission-0.1.0-py3-none-any.whl",
        "kubectl apply -f https://github.com/o/r/releases/download/v0.1.0/install.yaml",
        "helm install gpu-admission ./chart",
    ],
)
def test_the_published_check_sees_fetches_of_a_release(line: str) -> None:
    assert _FETCHES_A_RELEASE.search(line)


@pytest.mark.parametrize("line", ["pipx install .", "pip install .  # the clone", "make image"])
def test_the_published_check_leaves_installs_from_the_clone(line: str) -> None:
    assert not _FETCHES_A_RELEASE.search(line)


def test_every_kind_load_names_the_image_make_image_builds() -> None:
    loads = 0
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for line in _shell_lines(page.read_text()):
            if line.startswith("kind load docker-image "):
                loads += 1
                assert line.split(" #", 1)[0].split()[3] == _image(), f"{page.name}: {line}"
    assert loads >= 4  # README, home, quick start, install


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
