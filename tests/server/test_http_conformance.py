"""HTTP/1.1 over TLS as the apiserver speaks it, and as request smugglers try to speak it.

The real listener with its TLS context on 127.0.0.1, and the raw client of
tests/support/rawhttp.py made of a plain socket and a TLS object over memory buffers
(`TlsClient`): the test writes the exact bytes it wants (headers a library would never send)
and can half-close the TCP connection. Each client runs in a thread while the server serves on
the test's event loop.

Pinned here: what the apiserver relies on (pipelined requests answered in order,
`Expect: 100-continue`, an answer after the client half-closes, HTTP/1.1 whatever ALPN offers),
and what is refused with a close because two parsers could read it two ways: Content-Length
beside Transfer-Encoding, duplicate or signed Content-Length, folded header lines, codings that
do not end in chunked (400), and codings before chunked that the server does not decode
(501). A client that never reads its answers costs bounded memory and is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support.rawhttp import PATIENCE, TlsClient, review_body, running_tls
from webhook.server.http import connections
from webhook.server.http.limits import Limits
from webhook.server.reload import RuleHolder

T = TypeVar("T")
# Limits far above what a test takes; a closed connection lingers briefly.
CALM = Limits(idle_timeout=PATIENCE * 2, linger=0.1)


def head(*fields: str, path: str = "/validate") -> bytes:
    lines = [f"POST {path}?timeout=10s HTTP/1.1", "Host: gpu-admission"]
    lines += ["Content-Type: application/json", *fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def post(body: bytes, *fields: str) -> bytes:
    return head(f"Content-Length: {len(body)}", *fields) + body


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


async def in_thread(fn: Callable[[], T]) -> T:
    """A blocking client beside the server's event loop."""
    return await asyncio.to_thread(fn)


def uid_of(body: bytes) -> str:
    return str(json.loads(body)["response"]["uid"])


# --- what the apiserver relies on ----------------------------------------------------------


async def test_two_pipelined_reviews_in_one_write_are_answered_in_order(
    certs: Path, holder: RuleHolder
) -> None:
    async with running_tls(certs, holder, CALM) as servers:

        def client() -> None:
            c = TlsClient(servers.port, certs / "ca.crt")
            (first, uid1), (second, uid2) = review_body("one"), review_body("two")
            c.send(post(first) + post(second))
            for uid in (uid1, uid2):
                status, fields, body = c.response()
                assert status == 200 and fields.get("connection") != "close"
                assert uid_of(body) == uid
            c.close()

        await in_thread(client)


async def test_expect_100_continue_gets_continue_before_the_body_then_the_answer(
    certs: Path, holder: RuleHolder
) -> None:
    async with running_tls(certs, holder, CALM) as servers:

        def client() -> None:
            c = TlsClient(servers.port, certs / "ca.crt")
            body, uid = review_body()
            c.send(head(f"Content-Length: {len(body)}", "Expect: 100-continue"))
            status, _, interim = c.response()
            assert (status, interim) == (100, b"")
            assert c.buffer == b""  # nothing more until the body is sent
            c.send(body)
            status, _, answer = c.response()
            assert status == 200 and uid_of(answer) == uid
            c.close()

        await in_thread(client)


async def test_a_body_too_large_for_100_continue_is_refused_without_continue(
    certs: Path, holder: RuleHolder
) -> None:
    async with running_tls(certs, holder, CALM) as servers:

        def client() -> None:
            c = TlsClient(servers.port, certs / "ca.crt")
            c.send(head("Content-Length: 1000000000", "Expect: 100-continue"))
            status, fields, _ = c.response()
            assert status == 413 and fields.get("connection") == "close"
            c.close()

        await in_thread(client)


async def test_a_client_that_half_closes_after_its_request_still_gets_the_answer(
    certs: Path, holder: RuleHolder
) -> None:
    async with running_tls(certs, holder, CALM) as servers:

        def client() -> None:
            c = TlsClient(servers.port, certs / "ca.crt")
            body, uid = review_body()
            c.send(post(body))
            c.half_close()
            status, _, answer = c.response()
            assert status == 200 and uid_of(answer) == uid
            assert c.closed()  # and then the server ends the connection too
            c.close()

        await in_thread(client)


@pytest.mark.parametrize(
    ("offered", "agreed"),
    [
        (["h2", "http/1.1"], "http/1.1"),
        (["http/1.1"], "http/1.1"),
        # The server advertises http/1.1 alone: it never agrees to h2, and answers in HTTP/1.1.
        (["h2"], None),
    ],
    ids=["h2-and-http/1.1", "http/1.1-only", "h2-only"],
)
async def test_alpn_settles_on_http_1_1_or_on_no_protocol_and_http_1_1_answers(
    certs: Path, holder: RuleHolder, offered: list[str], agreed: str | None
) -> None:
    async with running_tls(certs, holder, CALM) as servers:

        def client() -> None:
            c = TlsClient(servers.port, certs / "ca.crt", alpn=offered)
            assert c.tls.selected_alpn_protocol() == agreed
            body, uid = review_body()
            c.send(post(body))
            status, _, answer = c.response()
            assert status == 200 and uid_of(answer) == uid
            c.close()

        await in_thread(client)


# --- what two parsers could read two ways: refused, and the connection closed -----------------


def _refused(port: int, ca: Path, request: bytes, status: int) -> None:
    c = TlsClient(port, ca)
    c.send(request)
    got, fields, body = c.response()
    assert got == status, body
    assert fields.get("connection") == "close"
    assert "error" in json.loads(body)
    assert c.closed()
    c.close()


def _smuggling() -> list[Any]:
    body, _ = review_body()
    n = len(body)
    return [
        pytest.param(
            head(f"Content-Length: {n}", "Transfer-Encoding: chunked") + chunked(body),
            id="content-length-and-chunked",
        ),
        pytest.param(
            head("Transfer-Encoding: chunked", f"Content-Length: {n}") + chunked(body),
            id="chunked-and-content-length",
        ),
        pytest.param(
            head(f"Content-Length: {n}", f"Content-Length: {n}") + body,
            id="duplicate-content-length",
        ),
        pytest.param(
            head(f"Content-Length: {n}", "Content-Length: 5") + body,
            id="two-content-lengths",
        ),
        pytest.param(head(f"Content-Length: {n}, {n}") + body, id="content-length-list"),
        pytest.param(head("Content-Length: +5") + body[:5], id="content-length-plus"),
        pytest.param(head("Content-Length: -5") + body[:5], id="content-length-minus"),
        pytest.param(
            head(f"Content-Length: {n}", "X-Note: one", " folded") + body,
            id="obsolete-line-folding",
        ),
        pytest.param(
            head(f"Content-Length: {n}", "X-Note: one", "\tfolded") + body,
            id="obsolete-line-folding-tab",
        ),
        pytest.param(
            head("Transfer-Encoding: chunked", " chunked") + chunked(body),
            id="folded-transfer-encoding",
        ),
    ]


@pytest.mark.parametrize("request_", _smuggling())
async def test_ambiguous_framing_is_refused_with_400_and_a_close(
    certs: Path, holder: RuleHolder, request_: bytes
) -> None:
    async with running_tls(certs, holder, CALM) as servers:
        await in_thread(lambda: _refused(servers.port, certs / "ca.crt", request_, 400))


@pytest.mark.parametrize(
    "codings",
    [
        ["gzip, chunked"],
        ["deflate, chunked"],
        ["GZIP , Chunked"],
        ["gzip", "chunked"],  # the same list over two header lines
    ],
)
async def test_a_coding_before_chunked_gets_501_and_a_close(
    certs: Path, holder: RuleHolder, codings: list[str]
) -> None:
    """The body is framed (chunked comes last), but what it holds is not understood."""
    body, _ = review_body()
    request = head(*(f"Transfer-Encoding: {c}" for c in codings)) + chunked(body)
    async with running_tls(certs, holder, CALM) as servers:
        await in_thread(lambda: _refused(servers.port, certs / "ca.crt", request, 501))


@pytest.mark.parametrize("coding", ["gzip", "identity", "chunked, gzip", "chunked, chunked"])
async def test_codings_that_do_not_end_in_one_chunked_get_400_and_a_close(
    certs: Path, holder: RuleHolder, coding: str
) -> None:
    """Where the body ends cannot be known: refused as malformed."""
    body, _ = review_body()
    request = head(f"Transfer-Encoding: {coding}") + chunked(body)
    async with running_tls(certs, holder, CALM) as servers:
        await in_thread(lambda: _refused(servers.port, certs / "ca.crt", request, 400))


async def test_chunked_in_any_case_is_chunked(certs: Path, holder: RuleHolder) -> None:
    async with running_tls(certs, holder, CALM) as servers:

        def client() -> None:
            c = TlsClient(servers.port, certs / "ca.crt")
            body, uid = review_body()
            c.send(head("Transfer-Encoding: Chunked") + chunked(body))
            status, _, answer = c.response()
            assert status == 200 and uid_of(answer) == uid
            c.close()

        await in_thread(client)


# --- a client that never reads its answers ---------------------------------------------------


async def test_a_client_that_never_reads_its_answers_is_dropped_with_bounded_memory(
    certs: Path, holder: RuleHolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reviews pipelined without reading a byte back: the server stops reading once its
    answers pile up, keeps what it buffers bounded, and drops the connection after the time an
    answer may wait to be read."""
    monkeypatch.setattr(connections, "RESPONSE_GRACE", 0.5)
    body, _ = review_body()
    request = post(body)
    async with running_tls(certs, holder, CALM) as servers:
        stop = False

        def client() -> int:
            c = TlsClient(servers.port, certs / "ca.crt")
            c.sock.settimeout(0.5)
            sent = 0
            with contextlib.suppress(OSError, ssl.SSLError):
                while not stop and sent < 64 * 1024 * 1024:
                    c.send(request * 20)
                    sent += len(request) * 20
            c.close()
            return sent

        task = asyncio.ensure_future(in_thread(client))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PATIENCE * 2
        buffered = 0
        seen = False
        while True:
            conns = list(servers.webhook_site.connections)
            seen = seen or bool(conns)
            for conn in conns:
                if conn.transport is not None:
                    buffered = max(buffered, conn.transport.get_write_buffer_size())
            if seen and not conns:
                break
            assert loop.time() < deadline, "the connection was never dropped"
            await asyncio.sleep(0.01)
        stop = True
        sent = await task
        assert seen
        # What the server holds for it stays near the transport's high-water mark (64 KiB by
        # default), however much the client pushed.
        assert buffered < 1024 * 1024, buffered
        assert sent < 64 * 1024 * 1024  # it was stopped, not served to the end
