"""The attackers of bench/abuse.py: each opens connections to the webhook the way a hostile
client would, reconnects as soon as it is cut, and counts what happened (`Tally`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from reviews import RS_CONTROLLER, SA_GROUPS, UID_MARK, gpu_pod, review

MIB = 1024 * 1024
REQUEST_TIMEOUT = 10.0  # the apiserver's ?timeout=10s


def huge_quantity_body() -> bytes:
    pod = gpu_pod()
    for container in pod["spec"]["containers"]:
        resources = container.setdefault("resources", {})
        for part in ("limits", "requests"):
            if "nvidia.com/gpu" in resources.get(part, {}):
                resources[part]["nvidia.com/gpu"] = "1e10000000"
    body = json.dumps(review(pod, user=RS_CONTROLLER, groups=SA_GROUPS))
    return body.replace(UID_MARK, "00000000-0000-4000-8000-000000000bad").encode()


# YAML "billion laughs": nine levels of nine aliases, 9**9 (387 million) strings if expanded.
RULE_BOMB = "\n".join(
    ["a0: &a0 [lol]"]
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    + ["rules:", "  gpu-memory-limit:", "    mode: *a9", ""]
)


@dataclass
class Tally:
    """What the attackers saw: connections made, answers by status, cuts."""

    connections: int = 0
    answers: dict[int, int] = field(default_factory=dict)
    cut: int = 0
    failed_connects: int = 0

    def answer(self, status: int) -> None:
        self.answers[status] = self.answers.get(status, 0) + 1

    def describe(self) -> str:
        answers = " ".join(f"{k}x{v}" for k, v in sorted(self.answers.items()))
        text = f"{self.connections} conns, {self.cut} cut"
        if answers:
            text += f", answers {answers}"
        if self.failed_connects:
            text += f", {self.failed_connects} refused"
        return text


Attack = Callable[["Target", float, Tally], Awaitable[None]]


@dataclass
class Target:
    port: int
    ctx: ssl.SSLContext

    async def connect(self, tally: Tally) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            stream = await asyncio.wait_for(
                asyncio.open_connection(
                    "127.0.0.1", self.port, ssl=self.ctx, server_hostname="127.0.0.1"
                ),
                REQUEST_TIMEOUT,
            )
        except (OSError, TimeoutError, ssl.SSLError):
            tally.failed_connects += 1
            await asyncio.sleep(0.5)
            raise
        tally.connections += 1
        return stream


async def _status(reader: asyncio.StreamReader, until: float) -> int | None:
    """The status of the next response, or None when the connection ends first."""
    try:
        line = await asyncio.wait_for(reader.readline(), max(0.01, until - time.monotonic()))
    except (OSError, ssl.SSLError, TimeoutError, asyncio.IncompleteReadError):
        return None
    return int(line.split()[1]) if line.startswith(b"HTTP/") else None


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 1.0)


async def _each(n: int, worker: Callable[[], Awaitable[None]]) -> None:
    await asyncio.gather(*(worker() for _ in range(n)), return_exceptions=True)


def slow_heads(n: int) -> Attack:
    async def attack(target: Target, until: float, tally: Tally) -> None:
        async def one() -> None:
            while time.monotonic() < until:
                try:
                    reader, writer = await target.connect(tally)
                except (OSError, TimeoutError, ssl.SSLError):
                    continue
                gone = asyncio.ensure_future(reader.read())
                try:
                    writer.write(b"POST /validate?timeout=10s HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                    while time.monotonic() < until and not gone.done():
                        writer.write(b"a")  # one byte a second, forever
                        await writer.drain()
                        await asyncio.wait([gone], timeout=1.0)
                except (OSError, ssl.SSLError):
                    pass
                if gone.done():
                    tally.cut += 1
                gone.cancel()
                await _close(writer)

        await _each(n, one)

    return attack


def stalled_uploads(n: int, size: int = 8 * MIB) -> Attack:
    async def attack(target: Target, until: float, tally: Tally) -> None:
        half = b"x" * (size // 2)

        async def one() -> None:
            while time.monotonic() < until:
                try:
                    reader, writer = await target.connect(tally)
                except (OSError, TimeoutError, ssl.SSLError):
                    continue
                try:
                    writer.write(
                        b"POST /validate?timeout=10s HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Type: application/json\r\n"
                        + f"Content-Length: {size}\r\n\r\n".encode()
                    )
                    writer.write(half)  # then nothing more
                    await writer.drain()
                except (OSError, ssl.SSLError):
                    tally.cut += 1
                    await _close(writer)
                    continue
                status = await _status(reader, until)
                if status is None:
                    tally.cut += 1 if time.monotonic() < until else 0
                else:
                    tally.answer(status)
                await _close(writer)

        await _each(n, one)

    return attack


def idle_connections(n: int) -> Attack:
    async def attack(target: Target, until: float, tally: Tally) -> None:
        async def one() -> None:
            while time.monotonic() < until:
                try:
                    reader, writer = await target.connect(tally)
                except (OSError, TimeoutError, ssl.SSLError):
                    continue
                try:  # say nothing; wait to be closed, then come back a second later
                    data = await asyncio.wait_for(
                        reader.read(), max(0.01, until - time.monotonic())
                    )
                    del data
                    tally.cut += 1
                except (OSError, ssl.SSLError):
                    tally.cut += 1
                except TimeoutError:
                    pass
                await _close(writer)
                await asyncio.sleep(1.0)

        await _each(n, one)

    return attack


def huge_quantities(n: int) -> Attack:
    async def attack(target: Target, until: float, tally: Tally) -> None:
        body = huge_quantity_body()
        request = (
            b"POST /validate?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

        async def one() -> None:
            while time.monotonic() < until:
                try:
                    reader, writer = await target.connect(tally)
                except (OSError, TimeoutError, ssl.SSLError):
                    continue
                try:
                    while time.monotonic() < until:
                        writer.write(request)
                        await writer.drain()
                        status = await _status(reader, until + REQUEST_TIMEOUT)
                        if status is None:
                            tally.cut += 1
                            break
                        tally.answer(status)
                        length = 0
                        while (line := await reader.readline()) not in (b"\r\n", b""):
                            if line.lower().startswith(b"content-length:"):
                                length = int(line.split(b":")[1])
                        await reader.readexactly(length)
                except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
                    tally.cut += 1
                await _close(writer)

        await _each(n, one)

    return attack


def rule_bomb(rules_dir: Path) -> Attack:
    async def attack(target: Target, until: float, tally: Tally) -> None:
        bomb = rules_dir / "zz-bomb.yaml"
        bomb.write_text(RULE_BOMB)
        try:
            await asyncio.sleep(max(0.0, until - time.monotonic()))
        finally:
            bomb.unlink()

    return attack
