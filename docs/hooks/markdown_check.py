"""Two slips the strict build would otherwise let through, reported as warnings (which
`mkdocs build --strict`, and so `make docs`, turns into a failed build):

- a list that renders as a paragraph: Python-Markdown wants a blank line before a list and
  four spaces of indent for what continues an item (its paragraphs, fenced blocks and nested
  lists); with two, the items after a fenced block end up as "- ..." lines inside a `<p>`;
- a code block line longer than CODE_WIDTH characters, which the reader scrolls sideways to
  see (the end of a command, or the comment that explains it).

`markdown_problems()` and `html_problems()` are what tests read.
"""

from __future__ import annotations

import html
import re
from typing import Any

from mkdocs.plugins import get_plugin_logger

log = get_plugin_logger("markdown_check")

# Characters of a code block line that fit without scrolling: with the wider grid of
# docs/stylesheets/extra.css, a window 1440 px wide shows 100 in the content column next to
# both sidebars (measured in headless Chromium: the theme's own grid shows about 80).
CODE_WIDTH = 100

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)")
_PARAGRAPH = re.compile(r"<p>(.*?)</p>", flags=re.S)
_LIST_MARKER = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S")
_TAG = re.compile(r"<[^>]+>")


def markdown_problems(markdown: str) -> list[str]:
    """Each code block line wider than CODE_WIDTH, as `line N: ...` (N counts from 1)."""
    problems: list[str] = []
    fence: tuple[str, int] | None = None  # the fence that opened the block, and its indent
    for number, line in enumerate(markdown.splitlines(), 1):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence = (match["fence"], len(match["indent"]))
            continue
        if match and match["fence"].startswith(fence[0]) and not line[match.end() :].strip():
            fence = None
            continue
        shown = line[fence[1] :] if line[: fence[1]].strip() == "" else line
        if len(shown) > CODE_WIDTH:
            problems.append(
                f"line {number}: a code line of {len(shown)} characters (at most {CODE_WIDTH} "
                f"fit): {shown[:60]}..."
            )
    return problems


def html_problems(page_html: str) -> list[str]:
    """Each list item that rendered as a line of a paragraph."""
    problems: list[str] = []
    for paragraph in _PARAGRAPH.findall(page_html):
        for line in paragraph.split("\n")[1:]:
            text = html.unescape(_TAG.sub("", line))
            if _LIST_MARKER.match(text):
                problems.append(
                    f"a list item rendered inside a paragraph (indent what continues an item "
                    f"by four spaces, and leave a blank line before a list): {text.strip()[:70]}"
                )
    return problems


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for problem in markdown_problems(markdown):
        log.warning("%s: %s", page.file.src_uri, problem)
    return markdown


def on_page_content(page_html: str, page: Any, config: Any, files: Any) -> str:
    for problem in html_problems(page_html):
        log.warning("%s: %s", page.file.src_uri, problem)
    return page_html
