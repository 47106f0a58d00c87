"""The error page (docs/errors.md) and the server agree: every error answer the server code
writes with a literal status and reason has its row on the page, with that status, and every
reason on the page is one the code writes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "webhook" / "server"
PAGE = ROOT / "docs" / "errors.md"

# The calls that turn a problem into an answer: (status, reason, ...) as their first arguments.
ANSWERING = {"_refuse", "error", "Refused", "Answer"}
ROW = re.compile(r"^\| (?P<status>\d{3}) \| `(?P<reason>[^`]+)` \|", flags=re.M)


def _text(node: ast.expr) -> str | None:
    """A literal reason, or the literal start of an f-string one (None: nothing literal)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        value = node.value
        return value.decode() if isinstance(value, bytes) else value
    if isinstance(node, ast.JoinedStr):
        head = ""
        for part in node.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            head += part.value
        return head or None
    return None


def _named_texts(tree: ast.Module) -> dict[str, str]:
    """Reasons worked out before the call: `within = f"..."`, or a property returning one."""
    named = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            text = _text(node.value)
            if text is not None:
                named[node.targets[0].id] = text
        elif isinstance(node, ast.FunctionDef) and isinstance(node.body[-1], ast.Return):
            returned = node.body[-1].value
            text = _text(returned) if returned is not None else None
            if text is not None:
                named[node.name] = text
    return named


def _answers() -> list[tuple[int, str, str]]:
    """(status, reason, where) for each answer the server code writes with literal values."""
    found = []
    for path in sorted(SERVER.rglob("*.py")):
        tree = ast.parse(path.read_text())
        named = _named_texts(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or len(node.args) < 2:
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            given = node.args[1]
            key = given.id if isinstance(given, ast.Name) else getattr(given, "attr", None)
            status, reason = node.args[0], _text(given) or named.get(key or "")
            if name not in ANSWERING or reason is None:
                continue
            if not isinstance(status, ast.Constant) or not isinstance(status.value, int):
                continue
            if status.value >= 400:
                found.append((status.value, reason, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return found


def _literals() -> str:
    """Every string the server code holds, literal parts of f-strings included."""
    texts = []
    for path in sorted(SERVER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
                value = node.value
                texts.append(value.decode() if isinstance(value, bytes) else value)
    return "\n".join(texts)


def test_the_scan_finds_the_answers_it_is_meant_to_find() -> None:
    """Guards the guard: the scan sees refusals in the HTTP wing and the review route."""
    statuses = {status for status, _, _ in _answers()}
    assert {400, 404, 405, 408, 413, 414, 431, 500, 501, 503} <= statuses


@pytest.mark.parametrize(("status", "reason", "where"), _answers(), ids=lambda v: str(v)[:40])
def test_every_error_answer_in_the_code_has_its_row(status: int, reason: str, where: str) -> None:
    rows = [m for m in ROW.finditer(PAGE.read_text()) if int(m["status"]) == status]
    assert any(m["reason"].startswith(reason) for m in rows), (
        f"{where} answers {status} {reason!r}: docs/errors.md has no row for it"
    )


def test_every_reason_on_the_page_is_written_by_the_code() -> None:
    code = _literals()
    missing = []
    for match in ROW.finditer(PAGE.read_text()):
        literal = match["reason"].split("{", 1)[0]
        if literal and literal not in code:
            missing.append(f"{match['status']} {match['reason']}")
    assert not missing, f"docs/errors.md names answers the server never writes: {missing}"
