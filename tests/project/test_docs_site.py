"""The docs site as a reader meets it: the version and the repository in the header, previous
and next links at the foot of each page, a home page written for users, and the markdown
check of `make docs` (lists that would render as paragraphs, code lines too wide to read
without scrolling) catching what it is for."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import markdown
import pytest
import yaml

from tests.support.browser import headless_chromium
from tests.support.paths import ROOT

DOCS = ROOT / "docs"


def _hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, DOCS / "hooks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    return folder


def _version() -> str:
    found = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found
    return found[1]


# --- the header, the footer, the home page ----------------------------------------------------


def test_the_header_names_the_version_and_links_the_repository(site: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    for page in ("index.html", "install/index.html"):
        html = (site / page).read_text()
        assert f"gpu-admission {_version()}" in html, page
        assert f'href="{config["repo_url"]}"' in html, page
    # The same repository the install pages clone.
    assert f"git clone {config['repo_url']} " in (DOCS / "quickstart.md").read_text()
    assert f"git clone {config['repo_url']} " in (DOCS / "install.md").read_text()


def test_every_page_links_its_previous_and_next(site: Path) -> None:
    install = (site / "install" / "index.html").read_text()
    assert "md-footer__link--prev" in install and "md-footer__link--next" in install
    home = (site / "index.html").read_text()
    assert "md-footer__link--next" in home and 'href="quickstart/"' in home


def test_the_home_page_is_for_users(site: Path) -> None:
    """What it does, a denial, how to install, where to go next; no contributor commands."""
    text = (DOCS / "index.md").read_text()
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert "What a refusal looks like" in headings and "Install" in headings
    assert headings[-1] == "Where to go next"
    assert "denied the request" in text
    for contributor in ("make test", "make run", "make lint", "make docs", "pytest"):
        assert contributor not in text, contributor
    where_next = text.split("## Where to go next", 1)[1]
    for page in ("quickstart.md", "install.md", "writing-rules.md", "rules-reference.md"):
        assert f"]({page})" in where_next, page
    if (DOCS / "cli.md").exists():
        assert "](cli.md)" in where_next


# User pages speak of behaviour: how the engine is built is for the contributors' pages.
_INSIDE = {
    "architecture.md",
    "development.md",
    "benchmarks.md",
    "dependencies.md",
    "http-server.md",
}


def test_user_pages_speak_of_behaviour_not_of_how_the_engine_is_built() -> None:
    internals = re.compile(r"mypyc|msgspec|never does\s+I/O|\bI/O-free\b|GPU_ADMISSION_COMPILE")
    for page in sorted(DOCS.glob("*.md")):
        if page.name in _INSIDE:
            continue
        found = internals.findall(page.read_text())
        assert not found, f"{page.name}: {found}"
    assert "mypyc" in (DOCS / "development.md").read_text()
    assert "without I/O" in (DOCS / "architecture.md").read_text()


# --- the markdown check -------------------------------------------------------------------------


def _render(text: str) -> str:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    names = [e if isinstance(e, str) else next(iter(e)) for e in config["markdown_extensions"]]
    return markdown.markdown(text, extensions=names)


TWO_SPACES = """- **Check**:

  ```
  gpu-admission rules check rules
  ```

  A test case gives an object.
- **Reload**: the folder is polled.
"""

FOUR_SPACES = """- **Check**:

    ```
    gpu-admission rules check rules
    ```

    A test case gives an object.

- **Reload**: the folder is polled.
"""


def test_a_list_after_a_two_space_fenced_block_is_caught_and_four_spaces_pass() -> None:
    check = _hook("markdown_check")
    problems = check.html_problems(_render(TWO_SPACES))
    assert len(problems) == 1 and "- Reload: the folder is polled." in problems[0]
    assert check.html_problems(_render(FOUR_SPACES)) == []
    assert _render(FOUR_SPACES).count("<li>") == 2 and _render(TWO_SPACES).count("<li>") == 1


def test_a_list_right_after_a_paragraph_is_caught() -> None:
    check = _hook("markdown_check")
    text = "Three things differ:\n- annotations are enforced;\n- classes are final.\n"
    assert len(check.html_problems(_render(text))) == 2
    assert check.html_problems(_render(text.replace(":\n-", ":\n\n-"))) == []
    # A line that only starts with a number is no list item.
    assert check.html_problems(_render("Kubernetes\n1.30 or newer, and\n2 replicas.\n")) == []


def test_code_lines_wider_than_the_page_are_caught_inside_lists_too() -> None:
    check = _hook("markdown_check")
    width = check.CODE_WIDTH
    fits = "x" * width
    wide = "y" * (width + 1)
    text = f"```\n{fits}\n{wide}\n```\n\n- item\n\n    ```\n    {fits}\n    {wide}\n    ```\n"
    problems = check.markdown_problems(text)
    assert [p.split(":", 1)[0] for p in problems] == ["line 3", "line 10"]
    assert check.markdown_problems(f"Prose is wrapped by the browser: {wide}\n") == []


def test_the_stylesheet_widens_the_grid_the_width_was_measured_with() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert "stylesheets/extra.css" in config["extra_css"]
    css = (DOCS / "stylesheets" / "extra.css").read_text()
    assert re.search(r"\.md-grid\s*\{\s*max-width:\s*90rem;", css)


# --- in a browser -------------------------------------------------------------------------------


def test_no_code_block_scrolls_sideways_in_a_1440_pixel_window(site: Path) -> None:
    """What CODE_WIDTH stands for, seen in Chromium: on every page of the built site, every
    code block shows its longest line whole next to both sidebars."""
    driver = headless_chromium(1440, 900)
    measure = """
        return [...document.querySelectorAll('pre > code')].map(c => [
            Math.max(...c.textContent.split('\\n').map(l => l.length)),
            c.scrollWidth - c.clientWidth,
            getComputedStyle(document.querySelector('.md-sidebar--secondary')).display,
        ]);
    """
    # A copy of the page's first code block holding one line of n characters: does it scroll?
    overflows = """
        const pre = document.querySelector('pre').cloneNode(true);
        pre.querySelector('code').textContent = 'x'.repeat(arguments[0]);
        document.querySelector('article').appendChild(pre);
        const code = pre.querySelector('code');
        const overflow = code.scrollWidth - code.clientWidth;
        pre.remove();
        return overflow > 0;
    """
    width = _hook("markdown_check").CODE_WIDTH
    scrolling: list[str] = []
    try:
        for page in sorted(site.rglob("index.html")):
            driver.get(page.as_uri())
            for chars, overflow, toc in driver.execute_script(measure):
                assert toc != "none", page  # both sidebars are shown at this width
                if overflow > 0:
                    scrolling.append(f"{page.parent.name}: a line of {chars} characters")
        driver.get((site / "install" / "index.html").as_uri())
        # CODE_WIDTH fits, and is no looser than it need be.
        assert not driver.execute_script(overflows, width)
        assert driver.execute_script(overflows, width + 12)
    finally:
        driver.quit()
    assert not scrolling, scrolling
