"""Bounded work per client: the real listeners (TLS and plain) in-process, real sockets.

Each test starts the webhook and probe ports of `webhook.server.app` on 127.0.0.1 with small
limits, and talks to them as a (mis)behaving client would: raw HTTP/1.1 over TLS, so a test
can stall mid-head or mid-body. Nothing here measures speed: a limit holds when the server
cuts the client at all (the client would otherwise finish), bench/abuse.py has the numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import ssl
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.rawhttp import (
    FAST,
    GPU_POD,
    PATIENCE,
    client_context,
    close,
    closed_by_server,
    connect,
    head,
    read_response,
    refused,
    review,
    running_tls,
)
from tests.support.reviews import review_for
from tests.support.webhook import serving
from webhook.server import process as server_process
from webhook.server.app import make_app
from webhook.server.http.limits import Limits
from webhook.server.http.state import ServerState
from webhook.server.reload import RuleHolder

# --- time ----------------------------------------------------------------------------------------


async def test_a_slowloris_head_is_cut_within_the_header_timeout(
    certs: Path, holder: RuleHolder
) -> None:
    limits = replace(FAST, idle_timeout=PATIENCE * 2)  # only the header timeout can cut it
    async with running_tls(certs, holder, limits) as servers:
        reader, writer = await connect(servers.port, client_context(certs))
        cut = asyncio.ensure_future(closed_by_server(reader))
        slow = b"POST /validate HTTP/1.1\r\nHost: gpu-admission\r\nX-Slow: " + b"a" * 200
        sent = 0
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            for byte in slow:  # one byte every 20 ms: 5 s in all, far past the 0.3 s timeout
                if cut.done():
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                sent += 1
                await asyncio.sleep(0.02)
        assert await cut, "the slow head was never cut"
        assert sent < len(slow), "the whole slow head went through"
        writer.close()


async def test_a_stalled_body_gets_408_and_the_connection_closes(
    certs: Path, holder: RuleHolder
) -> None:
    async with running_tls(certs, holder) as servers:
        reader, writer = await connect(servers.port, client_context(certs))
        writer.write(head(length=8 * 1024 * 1024) + b'{"apiVersion":')  # then nothing more
        await writer.drain()
        status, fields, body = await read_response(reader)
        assert status == 408
        assert "not received within 0.3 s" in json.loads(body)["error"]
        assert fields["connection"] == "close"
        assert await closed_by_server(reader)
        assert servers.state.body_bytes == 0  # its share of the large-body budget came back
        writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(
    certs: Path, holder: RuleHolder
) -> None:
    async with running_tls(certs, holder) as servers:
        stream = await connect(servers.port, client_context(certs))
        status, fields, _ = await review(stream)
        assert status == 200 and fields.get("connection") != "close"  # kept alive at first
        assert await closed_by_server(stream[0])
        await close(stream)


async def test_a_connection_that_never_starts_tls_is_cut_within_the_header_timeout(
    certs: Path, holder: RuleHolder
) -> None:
    async with running_tls(certs, holder) as servers:
        reader, writer = await connect(servers.port, None)  # plain TCP, no ClientHello
        assert await closed_by_server(reader)
        assert not servers.webhook_site.connections
        writer.close()


# --- connections ---------------------------------------------------------------------------------


async def test_at_the_cap_a_busy_server_refuses_the_next_connection(
    certs: Path, holder: RuleHolder
) -> None:
    limits = replace(FAST, max_connections=3, body_timeout=PATIENCE * 2, stalled_body=PATIENCE * 2)
    ctx = client_context(certs)
    async with running_tls(certs, holder, limits) as servers:
        busy = [await connect(servers.port, ctx) for _ in range(3)]
        for _, writer in busy:  # each in the middle of a body: none can be evicted yet
            writer.write(head(length=1000) + b"{")
            await writer.drain()
        await wait_until(lambda: len(servers.webhook_site.connections) == 3)
        await wait_until(
            lambda: all(c.phase.value == "request" for c in servers.webhook_site.connections)
        )
        assert await refused(servers.port, ctx)
        assert len(servers.webhook_site.connections) == 3
        for stream in busy:
            await close(stream)


async def _ended(reader: asyncio.StreamReader) -> bool:
    """Whether the server answered 408 or closed this connection (within a short wait)."""
    try:
        answer = await asyncio.wait_for(reader.read(65536), 0.5)
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return answer == b"" or answer.startswith(b"HTTP/1.1 408")


async def test_at_the_cap_a_trickling_body_makes_room_for_a_real_review(
    certs: Path, holder: RuleHolder
) -> None:
    """Holding every slot with bodies that never finish must not lock the apiserver out."""
    limits = replace(FAST, max_connections=3, body_timeout=PATIENCE * 2, stalled_body=0.2)
    ctx = client_context(certs)
    async with running_tls(certs, holder, limits) as servers:
        stalled = [await connect(servers.port, ctx) for _ in range(3)]
        for _, writer in stalled:
            writer.write(head(length=1000) + b"{")
            await writer.drain()
        await wait_until(
            lambda: (
                len(servers.webhook_site.connections) == 3
                and all(c.phase.value == "request" for c in servers.webhook_site.connections)
            )
        )
        await asyncio.sleep(0.6)  # well past stalled_body
        newcomer = await connect(servers.port, ctx)
        assert (await review(newcomer))[0] == 200
        assert len(servers.webhook_site.connections) == 3
        # One trickling body went (the oldest): told 408 or reset, then closed.
        gone = [await _ended(reader) for reader, _ in stalled]
        assert gone.count(True) == 1, gone
        for stream in [*stalled, newcomer]:
            await close(stream)


async def test_at_the_cap_the_longest_idle_connection_makes_room(
    certs: Path, holder: RuleHolder
) -> None:
    limits = replace(FAST, max_connections=3, idle_timeout=PATIENCE * 2)
    ctx = client_context(certs)
    async with running_tls(certs, holder, limits) as servers:
        idle = []
        for _ in range(3):
            stream = await connect(servers.port, ctx)
            assert (await review(stream))[0] == 200
            idle.append(stream)
        newcomer = await connect(servers.port, ctx)
        assert (await review(newcomer))[0] == 200
        assert await closed_by_server(idle[0][0])  # the longest idle went
        assert (await review(idle[1]))[0] == 200  # the others are still served
        assert len(servers.webhook_site.connections) == 3
        for stream in [*idle, newcomer]:
            await close(stream)


async def test_at_the_cap_a_connection_that_never_sent_a_request_goes_before_a_used_one(
    certs: Path, holder: RuleHolder
) -> None:
    """The apiserver's pooled connections outlive idle ones opened only to hold a slot."""
    limits = replace(FAST, max_connections=3, idle_timeout=PATIENCE * 2)
    ctx = client_context(certs)
    async with running_tls(certs, holder, limits) as servers:
        used = await connect(servers.port, ctx)
        assert (await review(used))[0] == 200  # the longest idle, but it did some work
        squatters = [await connect(servers.port, ctx) for _ in range(2)]
        await wait_until(lambda: len(servers.webhook_site.connections) == 3)
        newcomer = await connect(servers.port, ctx)
        assert (await review(newcomer))[0] == 200
        assert await closed_by_server(squatters[0][0])
        assert (await review(used))[0] == 200
        for stream in [used, *squatters, newcomer]:
            await close(stream)


async def test_at_the_cap_a_connection_stuck_before_its_handshake_makes_room(
    certs: Path, holder: RuleHolder
) -> None:
    """Slots held by connections that never say hello are taken back, oldest first."""
    limits = replace(FAST, max_connections=3, header_timeout=PATIENCE * 2)
    async with running_tls(certs, holder, limits) as servers:
        silent = [await connect(servers.port, None) for _ in range(3)]  # plain TCP, no TLS
        await wait_until(lambda: len(servers.webhook_site.connections) == 3)
        newcomer = await connect(servers.port, client_context(certs))
        assert (await review(newcomer))[0] == 200
        assert await closed_by_server(silent[0][0])  # the oldest went first
        assert len(servers.webhook_site.connections) == 3
        for _, writer in silent:
            writer.close()
        await close(newcomer)


# --- memory --------------------------------------------------------------------------------------


async def test_a_body_over_the_limit_is_refused_from_its_content_length_before_it_is_sent(
    certs: Path, holder: RuleHolder
) -> None:
    async with running_tls(certs, holder) as servers:
        reader, writer = await connect(servers.port, client_context(certs))
        writer.write(head(length=8 * 1024 * 1024 + 1))  # the head only: no body at all
        await writer.drain()
        status, fields, body = await read_response(reader)
        assert status == 413
        assert json.loads(body) == {"error": "request body over 8388608 bytes"}
        assert fields["connection"] == "close"
        writer.close()


async def test_a_chunked_body_is_cut_at_the_limit(certs: Path, holder: RuleHolder) -> None:
    limits = replace(FAST, max_body=64 * 1024, body_timeout=PATIENCE)
    async with running_tls(certs, holder, limits) as servers:
        reader, writer = await connect(servers.port, client_context(certs))
        writer.write(head(Transfer_Encoding="chunked"))
        chunk = b"x" * 16 * 1024
        status = 0
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            for _ in range(64):  # 1 MiB offered; the server must stop reading at 64 KiB
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
        status, _, body = await read_response(reader)
        assert status == 413
        assert "request body over 65536 bytes" in json.loads(body)["error"]
        writer.close()


async def test_large_bodies_past_the_budget_get_503_while_small_reviews_pass(
    certs: Path, holder: RuleHolder
) -> None:
    big = 600 * 1024  # over SMALL_BODY: takes from the budget
    limits = replace(FAST, body_memory=1024 * 1024, body_timeout=PATIENCE)
    ctx = client_context(certs)
    async with running_tls(certs, holder, limits) as servers:
        first = await connect(servers.port, ctx)
        first[1].write(head(length=big) + b"{")  # stalled: holds 600 KiB of the 1 MiB
        await first[1].drain()
        await wait_until(lambda: servers.state.body_bytes == big)
        second = await connect(servers.port, ctx)
        second[1].write(head(length=big))
        status, _, body = await read_response(second[0])
        assert status == 503 and "too many large request bodies" in json.loads(body)["error"]
        small = await connect(servers.port, ctx)
        assert (await review(small))[0] == 200  # an ordinary review never waits on the budget
        await close(first)
        await wait_until(lambda: servers.state.body_bytes == 0)
        for stream in (second, small):
            await close(stream)


async def test_memory_is_handed_back_after_a_large_body(
    holder: RuleHolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process (no TLS needed): after a body over 1 MiB, malloc_trim is called once."""
    trims: list[int] = []
    monkeypatch.setattr(server_process, "malloc_trim", lambda: trims.append)
    state = ServerState(Limits())
    async with serving(make_app(holder, state=state)) as client:
        small = await client.post("/validate?timeout=10s", json=review_for(GPU_POD))
        assert small.status == 200
        await asyncio.sleep(0.05)
        assert trims == []  # a small body costs nothing extra
        pod = json.loads(json.dumps(GPU_POD))
        pod["metadata"]["annotations"] = {"big": "x" * (2 * 1024 * 1024)}
        # a file-like body, as aiohttp asks for one this large (raw bytes would be a warning)
        big = io.BytesIO(json.dumps(review_for(pod)).encode())
        resp = await client.post(
            "/validate?timeout=10s", data=big, headers={"Content-Type": "application/json"}
        )
        assert resp.status == 200
        await wait_until(lambda: trims == [0])
        assert state.body_bytes == 0


# --- TLS -----------------------------------------------------------------------------------------


async def wait_until(check: Any, seconds: float = PATIENCE) -> None:
    """Poll a condition the server reaches on its own (not a timing assertion)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)
