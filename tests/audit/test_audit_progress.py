"""Progress on stderr: on a terminal once a run takes a second, never in CI logs or pipes."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT
from webhook.audit.progress import Progress

AUDIT = (sys.executable, "-m", "webhook", "audit", "--rules", str(ROOT / "rules"))
POD = (ROOT / "tests" / "golden" / "pod-no-memory-limit-no-probes" / "input.yaml").read_text()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_nothing_is_drawn_in_the_first_second_then_at_most_five_times_a_second() -> None:
    clock, err = Clock(), io.StringIO()
    progress = Progress(err, clock=clock)
    for _ in range(100):
        progress.bump("audited")
        clock.now += 0.009
    assert err.getvalue() == ""  # 0.9 s
    for _ in range(100):
        progress.bump("audited")
        clock.now += 0.01  # one more second
    draws = [int(d.split()[1].rstrip(".\x1b[K")) for d in err.getvalue().split("\r")[1:]]
    assert 5 <= len(draws) <= 6
    assert draws == sorted(draws) and draws[0] > 100 and draws[-1] >= 190


def test_report_lines_wipe_the_status_line_first() -> None:
    clock, err, out = Clock(), io.StringIO(), io.StringIO()
    progress = Progress(err, clock=clock)
    clock.now = 5
    items = progress.track(iter(["a", "b"]), lambda item: "audited")
    guarded = progress.guard(out)
    for item in items:
        print(item, file=guarded)
        clock.now += 1
    # After "a" the line was drawn; printing "b" wiped it; the end of the run wiped it again.
    assert err.getvalue() == "\raudited 1...\x1b[K\r\x1b[K\raudited 2...\x1b[K\r\x1b[K"
    assert out.getvalue() == "a\nb\n"


def test_without_a_terminal_nothing_is_written() -> None:
    clock, out = Clock(), io.StringIO()
    progress = Progress(None, clock=clock)
    clock.now = 10
    for _ in progress.track(range(3), lambda _: "audited"):
        pass
    assert progress.counts == {"audited": 3}
    assert progress.guard(out) is out


def test_a_long_audit_shows_progress_on_a_terminal(tmp_path: Path) -> None:
    # About 3 s with the compiled engine, 4 s without: the first line is drawn after 1 s, so
    # the audit must outlast that on a faster machine too (4,000 pods once did not, compiled).
    (tmp_path / "many.yaml").write_text((POD + "---\n") * 12_000)
    master, slave = pty.openpty()
    report = (tmp_path / "report.json").open("wb")  # a file: nothing to drain but the terminal
    proc = subprocess.Popen(
        [*AUDIT, str(tmp_path / "many.yaml"), "-o", "json"],
        stdout=report,
        stderr=slave,
        cwd=ROOT,
    )
    os.close(slave)
    seen = b""
    while True:  # drain the terminal while the audit runs
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the audit closed its end
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=120)
    os.close(master)
    report.close()
    assert proc.returncode == 0
    assert b"\raudited " in seen
    assert seen.endswith(b"\r\x1b[K")  # wiped at the end
    assert json.loads((tmp_path / "report.json").read_text())["summary"]["objects"] == 12_000
