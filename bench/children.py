"""Child processes of bench/load.py: pinning to a core, start/stop, output, health checks.

Every child is pinned (or not) by a preexec_fn that also has the kernel SIGTERM it when the
benchmark dies, and Processes keeps them all so one `finally` stops every one of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from clients import ssl_client_context

REPO = Path(__file__).resolve().parent.parent
PR_SET_PDEATHSIG = 1


def _pinned(core: int | None) -> Callable[[], None]:
    """preexec_fn: pin the child to `core` and have the kernel SIGTERM it if we die first."""

    def preexec() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return preexec


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Processes:
    """Every child we start, so one `finally` can stop all of them."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, cmd: list[str], core: int | None, **kw: Any) -> subprocess.Popen[bytes]:
        # Own session: Ctrl-C reaches only us, and `finally` stops children in order.
        proc = subprocess.Popen(
            cmd, preexec_fn=_pinned(core), cwd=REPO, start_new_session=True, **kw
        )
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(ValueError):
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc)


def read_line(stream: IO[bytes], timeout: float) -> bytes:
    """One line from a child's stdout, or TimeoutError: a stuck child must not hang the run."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        raise TimeoutError(f"no output from a child process within {timeout:.0f}s")
    return stream.readline()


def wait_healthy(proc: subprocess.Popen[bytes], port: int, ca: Path, stderr: Path) -> None:
    deadline = time.monotonic() + 20
    ctx = ssl_client_context(ca)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"server exited with {proc.returncode} before /healthz:\n{tail(stderr)}"
            )
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=1)
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.05)
    raise RuntimeError(f"server on port {port} not healthy after 20s:\n{tail(stderr)}")


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no stderr captured)"
    return "\n".join(text[-lines:]) or "(stderr is empty)"
