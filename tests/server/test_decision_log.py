"""The decision log line: written straight to the JSON handler `serve` installs, the same line
the logging module would have written, and through logging whenever anything else listens."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sys
from collections.abc import Iterator

import pytest

from webhook import loglines, logs
from webhook.loglines import info_line

FIELDS = {
    "event": "admission",
    "uid": "7f0c1e9a-1111-4c3b-9d2e-000000000001",
    "kind": "Pod",
    "namespace": "ml-team",
    "objectName": "trainer-0",
    "operation": "CREATE",
    "dryRun": False,
    "allowed": False,
    "findings": [{"rule": "privileged-gpu", "mode": "enforce", "field": "spec.containers[0]"}],
}
MESSAGE = "denied Pod ml-team/trainer-0: privileged-gpu=enforce"
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


class CountingStream(io.StringIO):
    """stderr that counts its writes: each one is a system call in a running server."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingStream]:
    """`logs.setup` as `serve --log-format json` calls it, writing to a buffer that counts its
    writes; the logging configuration the test run had is put back afterwards."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level, logs._direct
    buffer = CountingStream()
    monkeypatch.setattr(sys, "stderr", buffer)
    logs.setup("info", "json")
    yield buffer
    root.handlers[:], level, logs._direct = saved
    root.setLevel(level)


def _ours_alone() -> logging.Logger:
    """The decisions logger, with `setup`'s handler the only one at the root again (pytest
    adds its capture handler to the root for each test), as in a running server."""
    assert logs._direct is not None
    logging.getLogger().handlers[:] = [logs._direct]
    logging.getLogger("gpu-admission")  # the server's own logger: the decisions logger's parent
    decisions = logging.getLogger("gpu-admission.decisions")
    assert decisions.parent is logging.getLogger("gpu-admission")
    assert loglines._alone(decisions, logs._direct)
    return decisions


def _lines(buffer: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_the_direct_line_is_the_line_logging_writes(
    stderr: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    decisions = _ours_alone()
    made: list[object] = []
    with monkeypatch.context() as patched:
        patched.setattr(logging.Logger, "makeRecord", lambda *a, **k: made.append(a))
        info_line(decisions, MESSAGE, FIELDS)
    assert made == []  # no LogRecord: the direct path wrote it
    decisions.info("%s", MESSAGE, extra=FIELDS)  # the formatter's line, through a LogRecord
    direct, through_logging = _lines(stderr)
    assert list(direct) == list(through_logging)  # the same keys, in the same order
    assert TS.match(str(direct.pop("ts"))) and TS.match(str(through_logging.pop("ts")))
    assert direct == through_logging
    assert direct == {"level": "info", "logger": "gpu-admission.decisions", "msg": MESSAGE} | FIELDS


def test_anything_else_listening_gets_a_record(stderr: io.StringIO) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    decisions = _ours_alone()
    keep = Keep()
    decisions.addHandler(keep)
    try:
        info_line(decisions, MESSAGE, FIELDS)
    finally:
        decisions.removeHandler(keep)
    assert [r.getMessage() for r in records] == [MESSAGE]
    assert records[0].__dict__["findings"] == FIELDS["findings"]
    assert _lines(stderr)[0]["uid"] == FIELDS["uid"]  # and the JSON line is still written


def test_nothing_is_written_below_the_level(stderr: io.StringIO) -> None:
    decisions = _ours_alone()
    logging.getLogger().setLevel(logging.WARNING)
    info_line(decisions, MESSAGE, FIELDS)
    assert stderr.getvalue() == ""


def test_text_format_goes_through_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level, logs._direct
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buffer)
    try:
        logs.setup("info", "text")
        info_line(logging.getLogger("gpu-admission.decisions"), MESSAGE, FIELDS)
    finally:
        root.handlers[:], level, logs._direct = saved
        root.setLevel(level)
    assert buffer.getvalue().rstrip().endswith(f"INFO {MESSAGE}")


def test_a_broken_stream_does_not_fail_the_review(stderr: io.StringIO) -> None:
    decisions = _ours_alone()
    stderr.close()  # writes now raise; logging reports its own error instead
    info_line(decisions, MESSAGE, FIELDS)  # returns: the review's answer still goes out
    assert logs._direct is not None
    assert logs._direct._queued == []  # dropped, not held to grow with every review
    # Once there is somewhere to write again, the next line goes out alone and whole.
    fresh = io.StringIO()
    logs._direct.setStream(fresh)
    info_line(decisions, "denied Pod ml-team/next", {**FIELDS, "objectName": "next"})
    assert [line["objectName"] for line in _lines(fresh)] == ["next"]


async def test_lines_of_one_loop_turn_go_out_in_one_write_and_in_order(
    stderr: CountingStream,
) -> None:
    decisions = _ours_alone()
    for i in range(3):
        info_line(decisions, f"denied Pod ml-team/p-{i}", {**FIELDS, "objectName": f"p-{i}"})
    assert stderr.writes == 0  # queued until the loop's turn ends
    await asyncio.sleep(0)
    assert stderr.writes == 1
    info_line(decisions, "denied Pod ml-team/p-3", {**FIELDS, "objectName": "p-3"})
    logging.getLogger("gpu-admission").warning("reload refused")  # logged after it
    info_line(decisions, "denied Pod ml-team/p-4", {**FIELDS, "objectName": "p-4"})
    await asyncio.sleep(0)
    assert logs._direct is not None
    logs._direct.flush()  # what logging.shutdown does at exit
    names = [line.get("objectName", line["msg"]) for line in _lines(stderr)]
    assert names == ["p-0", "p-1", "p-2", "p-3", "reload refused", "p-4"]


async def test_a_drain_left_on_a_loop_that_has_gone_does_not_hold_lines_back(
    stderr: CountingStream,
) -> None:
    decisions = _ours_alone()
    assert logs._direct is not None
    gone = asyncio.new_event_loop()
    gone.close()
    logs._direct._drain_on = gone  # a drain was scheduled there and never ran
    info_line(decisions, MESSAGE, FIELDS)
    await asyncio.sleep(0)
    assert stderr.writes == 1
    assert [line["uid"] for line in _lines(stderr)] == [FIELDS["uid"]]
