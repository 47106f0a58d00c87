"""HTTP/1.1 as the webhook speaks it (server/http/protocol.py), over real sockets on 127.0.0.1.

What the apiserver, the kubelet and Prometheus rely on (keep-alive, pipelining in order,
`Expect: 100-continue`, chunked bodies, `Connection: close`, HTTP/1.0), and what a hostile
client gets: a 4xx naming the problem and a closed connection, never an echo of its bytes, a
traceback, or a connection held open by answers it does not read. The listener's limits on
time and count are in test_server_limits.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.rawhttp import connect, post, read_response, review_body, running_plain
from webhook.server.app import make_app
from webhook.server.http.limits import Limits
from webhook.server.http.ports import start_servers
from webhook.server.http.protocol import MAX_HEAD, MAX_URL, Connection, Phase
from webhook.server.http.state import ServerState
from webhook.server.reload import RuleHolder

PATIENCE = 5.0


async def closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(65536), PATIENCE) == b""
    except ConnectionError:
        return True


async def test_pipelined_reviews_are_answered_in_order_on_one_connection(
    holder: RuleHolder,
) -> None:
    async with running_plain(holder) as servers:
        reader, writer = await connect(servers.port)
        bodies = [review_body(f"pod-{i}") for i in range(5)]
        writer.write(b"".join(post(body) for body, _ in bodies))  # all at once
        for _, uid in bodies:
            status, fields, answer = await read_response(reader)
            assert status == 200 and fields.get("connection") != "close"
            assert json.loads(answer)["response"]["uid"] == uid
        writer.close()


async def test_a_review_split_across_many_writes_is_answered(holder: RuleHolder) -> None:
    async with running_plain(holder) as servers:
        reader, writer = await connect(servers.port)
        body, uid = review_body()
        data = post(body)
        for i in range(0, len(data), 7):
            writer.write(data[i : i + 7])
            await writer.drain()
        status, _, answer = await read_response(reader)
        assert status == 200 and json.loads(answer)["response"]["uid"] == uid
        writer.close()


async def test_expect_100_continue_gets_continue_then_the_answer(holder: RuleHolder) -> None:
    async with running_plain(holder) as servers:
        reader, writer = await connect(servers.port)
        body, uid = review_body()
        request = post(body, Expect="100-continue")
        head, _, _ = request.partition(b"\r\n\r\n")
        writer.write(head + b"\r\n\r\n")
        assert await asyncio.wait_for(reader.readline(), PATIENCE) == b"HTTP/1.1 100 Continue\r\n"
        assert await reader.readline() == b"\r\n"
        writer.write(body)
        status, _, answer = await read_response(reader)
        assert status == 200 and json.loads(answer)["response"]["uid"] == uid
        writer.close()


async def test_a_chunked_review_is_answered(holder: RuleHolder) -> None:
    async with running_plain(holder) as servers:
        reader, writer = await connect(servers.port)
        body, uid = review_body()
        chunks = [body[i : i + 100] for i in range(0, len(body), 100)]
        encoded = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
        writer.write(post(b"", Transfer_Encoding="chunked") + encoded)
        status, _, answer = await read_response(reader)
        assert status == 200 and json.loads(answer)["response"]["uid"] == uid
        writer.close()


@pytest.mark.parametrize(("version", "headers"), [("1.1", {"Connection": "close"}), ("1.0", {})])
async def test_a_client_that_asks_to_close_gets_its_answer_then_a_close(
    holder: RuleHolder, version: str, headers: dict[str, str]
) -> None:
    async with running_plain(holder) as servers:
        reader, writer = await connect(servers.port)
        body, uid = review_body()
        writer.write(post(body, version=version, **headers))
        status, fields, answer = await read_response(reader)
        assert status == 200 and fields["connection"] == "close"
        assert json.loads(answer)["response"]["uid"] == uid
        assert await closed(reader)
        writer.close()


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        (b"GET /validate HTTP/1.1", 405),
        (b"POST /nowhere HTTP/1.1", 404),
        (b"GET /healthz HTTP/1.1", 200),
    ],
)
async def test_routes_methods_and_unknown_paths(
    holder: RuleHolder, request_line: bytes, status: int
) -> None:
    async with running_plain(holder) as servers:
        reader, writer = await connect(servers.port)
        writer.write(request_line + b"\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        got, fields, body = await read_response(reader)
        assert got == status
        if status != 200:
            assert fields["content-type"] == "application/json"
            assert json.loads(body)["error"]  # a reason, for the person reading the log
        writer.close()


async def test_head_gets_the_gets_headers_and_no_body(holder: RuleHolder) -> None:
    """HEAD /healthz, as some probes send it: the GET's status and length, no body, and the
    connection stays usable."""
    async with running_plain(holder) as servers:
        reader, writer = await connect(servers.port)
        writer.write(
            b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        status_line = await asyncio.wait_for(reader.readline(), PATIENCE)
        assert status_line.startswith(b"HTTP/1.1 200")
        fields: dict[str, str] = {}
        while (line := await reader.readline()) != b"\r\n":
            name, _, value = line.decode().partition(":")
            fields[name.strip().lower()] = value.strip()
        assert fields["content-length"] == "2"  # "ok", not sent
        status, _, body = await read_response(reader)  # the next answer starts right here
        assert status == 200 and body == b"ok"
        writer.close()


async def test_garbage_gets_400_without_its_bytes_echoed_and_a_close(
    holder: RuleHolder,
) -> None:
    async with running_plain(holder) as servers:
        reader, writer = await connect(servers.port)
        secret = b"SECRET-TOKEN-" + b"x" * 100
        writer.write(b"\x16\x03\x01 " + secret + b"\r\n\r\n")  # e.g. TLS to the plain port
        status, fields, body = await read_response(reader)
        assert status == 400 and fields["connection"] == "close"
        assert b"malformed request" in body and b"SECRET" not in body
        assert await closed(reader)
        writer.close()


async def test_a_long_url_gets_414_and_a_huge_head_431(holder: RuleHolder) -> None:
    async with running_plain(holder) as servers:
        reader, writer = await connect(servers.port)
        writer.write(b"POST /validate?" + b"a" * (MAX_URL + 1) + b" HTTP/1.1\r\n\r\n")
        assert (await read_response(reader))[0] == 414
        assert await closed(reader)
        writer.close()
        reader, writer = await connect(servers.port)
        writer.write(b"POST /validate HTTP/1.1\r\n")
        filler = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"v" * 100) for i in range(40))
        writer.write(filler)
        assert (await read_response(reader))[0] == 431  # too many headers
        writer.close()
        reader, writer = await connect(servers.port)
        writer.write(b"POST /validate HTTP/1.1\r\nX-Endless: ")
        with contextlib.suppress(ConnectionError):
            for _ in range(MAX_HEAD // 16384 + 2):  # one header value that never ends
                writer.write(b"v" * 16384)
                await writer.drain()
        assert (await read_response(reader))[0] == 431
        writer.close()


async def test_a_client_that_never_reads_its_answers_is_cut(holder: RuleHolder) -> None:
    """Pipelined requests whose answers pile up unread: the server stops reading, and after
    the response grace the connection is cut, so it never holds memory for long."""
    from webhook.server.http import connections

    cuts = connections.CUT.labels("unread_answers")
    before = cuts._value.get()
    limits = Limits(idle_timeout=PATIENCE * 2, body_timeout=0.2)
    grace = connections.RESPONSE_GRACE
    connections.RESPONSE_GRACE = 0.3
    try:
        async with running_plain(holder, limits) as servers:
            _, writer = await connect(servers.port)
            transport = writer.transport
            transport.pause_reading()  # type: ignore[attr-defined]  # this client reads nothing
            get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"  # a large answer, a small ask
            with contextlib.suppress(ConnectionError):
                for _ in range(200):
                    writer.write(get * 50)
                    await writer.drain()
                    if not servers.webhook_site.connections:
                        break
            deadline = asyncio.get_running_loop().time() + PATIENCE
            while servers.webhook_site.connections:
                assert asyncio.get_running_loop().time() < deadline, "never cut"
                await asyncio.sleep(0.02)
            # Cut as soon as it pipelined past answers it had not read, not after answering
            # everything it sent.
            assert cuts._value.get() > before
            writer.close()
    finally:
        connections.RESPONSE_GRACE = grace


async def test_tiny_chunks_and_endless_trailers_are_cut_by_the_bytes_on_the_wire(
    holder: RuleHolder,
) -> None:
    """A body in 1-byte chunks costs the server its bytes, not an object per chunk, and the
    framing around it is bounded too: past the wire limit of a request, 413 and close. So
    are trailers that never end after the last chunk."""
    limits = Limits(idle_timeout=PATIENCE * 2, max_body=64 * 1024, body_timeout=PATIENCE)
    async with running_plain(holder, limits) as servers:
        reader, writer = await connect(servers.port)
        writer.write(post(b"", Transfer_Encoding="chunked"))
        with contextlib.suppress(ConnectionError):
            for _ in range(100):  # 600 KB of framing for 100 KB of body, far past the limit
                writer.write(b"1\r\nx\r\n" * 1000)
                await writer.drain()
        status, fields, body = await read_response(reader)
        assert status == 413 and fields["connection"] == "close"
        assert b" over " in body  # the wire limit or the body limit, whichever first
        writer.close()
        reader, writer = await connect(servers.port)
        writer.write(post(b"", Transfer_Encoding="chunked") + b"1\r\nx\r\n0\r\nX-Trailer: ")
        with contextlib.suppress(ConnectionError):
            for _ in range(40):
                writer.write(b"v" * 16384)
                await writer.drain()
        assert (await read_response(reader))[0] == 413
        assert servers.state.body_bytes == 0
        writer.close()


async def test_a_body_for_no_route_is_never_read(holder: RuleHolder) -> None:
    """404 as soon as the head is in: an 8 MiB upload to a path nobody serves draws nothing
    from the large-body budget and is not waited for."""
    async with running_plain(holder) as servers:
        reader, writer = await connect(servers.port)
        writer.write(b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n{")
        status, fields, body = await read_response(reader)
        assert status == 404 and fields["connection"] == "close"
        assert b"nowhere" not in body  # the path is not echoed either
        assert servers.state.body_bytes == 0
        writer.close()


async def test_the_probe_port_takes_no_large_body(holder: RuleHolder) -> None:
    from webhook.server.app import make_probe_app

    state = ServerState(Limits(idle_timeout=PATIENCE * 2))
    servers = await start_servers(
        make_app(holder, state=state, probes=False),
        host="127.0.0.1",
        port=0,
        ssl_context=None,
        probe_app=make_probe_app(holder, state=state),
        probe_port=0,
    )
    try:
        assert servers.probe_port is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", servers.probe_port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n")
        status, _, body = await read_response(reader)
        assert status == 413 and b"4096" in body
        assert state.body_bytes == 0
        writer.close()
    finally:
        await servers.stop()


# --- any bytes at all, in-process ---------------------------------------------------------------


class _Transport:
    """What the protocol writes, and whether it closed; enough of asyncio.Transport."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    abort = close

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class _Listener:
    def __init__(self) -> None:
        self.gone: list[Connection] = []

    def now(self) -> float:
        return 0.0

    def forget(self, conn: Connection) -> None:
        self.gone.append(conn)


_REQUEST_PARTS = st.sampled_from(
    [
        b"POST /validate HTTP/1.1\r\n",
        b"GET /healthz HTTP/1.1\r\n",
        b"Content-Length: 5\r\n",
        b"Content-Length: 99999999999\r\n",
        b"Transfer-Encoding: chunked\r\n",
        b"Expect: 100-continue\r\n",
        b"\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        b'{"kind":"AdmissionReview"}',
    ]
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chunks=st.lists(st.one_of(st.binary(max_size=64), _REQUEST_PARTS), max_size=12),
)
async def test_any_bytes_get_answers_or_a_close_never_an_exception(
    holder: RuleHolder, chunks: list[bytes]
) -> None:
    """Whatever arrives, in whatever pieces: every answer written is a whole HTTP/1.1
    response, and a request that could not be read closes the connection."""
    routes = make_app(holder, state=ServerState(Limits(max_body=1024)))
    conn = Connection(_Listener(), routes)
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    for chunk in chunks:
        conn.data_received(chunk)
    conn.connection_lost(None)
    out = bytes(transport.written)
    statuses = [
        int(line.split()[1]) for line in out.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")
    ]
    assert all(s in (100, 200, 400, 404, 405, 413, 414, 431, 503) for s in statuses), out[:500]
    unreadable = (b"malformed request", b"request body over", b"too long", b"too large")
    if any(reason in out for reason in unreadable):  # the request itself could not be read
        assert transport.closed or conn.lingering  # a 413 reads and drops a little first
    assert conn.phase is Phase.CLOSING
    assert routes.state.body_bytes == 0
