"""Load clients of bench/load.py: the raw and aiohttp HTTPS clients and the client worker.

`load.py --client-worker` runs `run_client_worker()` in a child process: it reads a spec on
stdin, drives the server with N keep-alive connections when told "go", and prints a result.
`post_once()` is the single request outside the load (preflight).
"""

from __future__ import annotations

import asyncio
import http.client
import ssl
import sys
import time
from array import array
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import orjson
from reviews import UID_MARK

REQUEST_TIMEOUT = 10.0  # the apiserver's ?timeout=10s: the longest a request may take
# What the apiserver's webhook client sends (Go adds Accept-Encoding itself; aiohttp does too).
APISERVER_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, */*",
    "User-Agent": "kube-apiserver-admission",
}


def ssl_client_context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def post_once(port: int, ca: Path, path: str, body: bytes) -> tuple[int, bytes]:
    """One request outside the load, to check a scenario and show what the webhook answers."""
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, context=ssl_client_context(ca), timeout=REQUEST_TIMEOUT
    )
    try:
        conn.request("POST", path, body=body, headers=APISERVER_HEADERS)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def get_json(port: int, ca: Path, path: str) -> Any:
    """A GET outside the load (the stage totals of `serve --profile-stages`)."""
    conn = http.client.HTTPSConnection(
        "127.0.0.1", port, context=ssl_client_context(ca), timeout=REQUEST_TIMEOUT
    )
    try:
        conn.request("GET", path)
        return orjson.loads(conn.getresponse().read())
    finally:
        conn.close()


Send = Callable[[bytes], Awaitable[tuple[int, bytes]]]


class RawConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection, request/response in lock-step (no pipelining).

    `--client raw`: the same request line, headers and body as the aiohttp client, for a
    fraction of its CPU, so the floor is measured where the aiohttp client saturates first.
    Responses must carry Content-Length (aiohttp's web.Response always does).
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is duck-typed

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None or self.waiter.done():
            return
        head = bytes(self.buf[:end]).lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            self.waiter.set_exception(ConnectionError("response without Content-Length"))
            return
        stop = head.find(b"\r\n", at + 2)  # "\r\ncontent-length:" is 17 bytes
        length = int(head[at + 17 : stop if stop >= 0 else None])
        if len(self.buf) < end + 4 + length:
            return
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        self.waiter.set_result((int(head[9:12]), body))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionError("server closed the connection"))

    async def request(self, data: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.transport.write(data)
        timer = loop.call_later(REQUEST_TIMEOUT, self.waiter.cancel)
        try:
            return await self.waiter
        except asyncio.CancelledError:
            raise TimeoutError(f"no response within {REQUEST_TIMEOUT:g} s") from None
        finally:
            timer.cancel()


def _raw_sender(port: int, ctx: ssl.SSLContext, parts: list[bytes]) -> Send:
    """A `Send` over its own RawConnection, reconnecting when the server closes it."""
    conn: RawConnection | None = None

    async def send(uid: bytes) -> tuple[int, bytes]:
        nonlocal conn
        if conn is None or conn.transport is None:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(
                RawConnection, "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1"
            )
        try:
            return await conn.request(uid.join(parts))
        except BaseException:
            if conn.transport is not None:
                conn.transport.abort()
            conn = None
            raise

    return send


async def _drive(spec: dict[str, Any], t_start: float, t_end: float) -> dict[str, Any]:
    """N workers, each on one keep-alive connection; requests ending in [t_start, t_end) count.

    Lean on purpose (pre-encoded body parts, the uid spliced in as bytes at every UID_MARK, so
    a scenario may also make names unique with it; no cookie jar, orjson):
    the client shares the machine with the server and must not be the thing measured.
    """
    import aiohttp

    parts = spec["body"].encode().split(UID_MARK.encode())
    port: int = spec["port"]
    path: str = spec["path"]
    check_uid: bool = spec["check_uid"]
    cap: int = spec["max_requests"]
    tag: int = spec["tag"]
    concurrency: int = spec["concurrency"]
    ctx = ssl_client_context(Path(spec["ca"]))
    clock = time.monotonic
    latencies = array("d")
    state = {"issued": 0, "ok": 0, "errors": 0}
    samples: list[dict[str, Any]] = []

    def error(kind: str, uid: str, **detail: Any) -> None:
        state["errors"] += 1
        if len(samples) < 5:
            samples.append({"kind": kind, "uid": uid, **detail})

    async def attempt(w: int, n: int, send: Send, t0: float) -> None:
        """One review; its latency runs from `t0` (when it was sent, or was due)."""
        uid = b"%08x-%04x-4000-8000-%012x" % (tag, w, n)
        try:
            status, data = await send(uid)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            error("exception", uid.decode(), error=repr(exc))
            return
        t1 = clock()
        if status != 200:
            error("status", uid.decode(), status=status, body=data[:500].decode("replace"))
            return
        if check_uid:
            try:
                echoed = orjson.loads(data)["response"]["uid"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                echoed = None
            if echoed != uid.decode():
                error("uid", uid.decode(), echoed=echoed, body=data[:500].decode("replace"))
                return
        if t_start <= t1 < t_end:
            state["ok"] += 1
            latencies.append(t1 - t0)

    async def worker(w: int, send: Send) -> None:
        n = 0
        while state["issued"] < cap and clock() < t_end:
            state["issued"] += 1
            n += 1
            await attempt(w, n, send, clock())

    async def open_loop(senders: list[Send]) -> None:
        """Reviews arrive at a fixed rate from now to `t_end`, whatever the server does: each
        takes an idle connection (waiting while all are busy), and its latency runs from the
        moment it was due, so a server falling behind shows in the percentiles instead of
        slowing the arrivals (no coordinated omission)."""
        idle: asyncio.Queue[Send] = asyncio.Queue()
        for send in senders:
            idle.put_nowait(send)
        interval = 1.0 / float(spec["rate"])
        pending: set[asyncio.Task[None]] = set()

        async def arrival(n: int, due: float) -> None:
            send = await idle.get()
            try:
                await attempt(0, n, send, due)
            finally:
                idle.put_nowait(send)

        due = clock()
        while due < t_end and state["issued"] < cap:
            now = clock()
            while due <= now and due < t_end and state["issued"] < cap:
                state["issued"] += 1
                task = asyncio.create_task(arrival(state["issued"], due))
                pending.add(task)
                task.add_done_callback(pending.discard)
                due += interval
            await asyncio.sleep(max(0.0, due - clock()))
        await asyncio.gather(*list(pending))

    if spec["client"] == "raw":
        uid_length = len(b"%08x-%04x-4000-8000-%012x" % (0, 0, 0))
        length = sum(map(len, parts)) + uid_length * (len(parts) - 1)
        headers = "".join(f"{k}: {v}\r\n" for k, v in APISERVER_HEADERS.items())
        prefix = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}"
            f"Accept-Encoding: gzip\r\nContent-Length: {length}\r\n\r\n"
        ).encode()
        parts = [prefix + parts[0], *parts[1:]]
        senders = [_raw_sender(port, ctx, parts) for _ in range(concurrency)]
        if spec.get("rate"):
            await open_loop(senders)
        else:
            await asyncio.gather(*(worker(w, s) for w, s in enumerate(senders)))
    elif spec.get("rate"):
        raise ValueError("the open loop drives the raw client only")
    else:
        url = f"https://127.0.0.1:{port}{path}"
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency, ssl=ctx),
            headers=APISERVER_HEADERS,
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT),
            cookie_jar=aiohttp.DummyCookieJar(),
        ) as session:

            async def send(uid: bytes) -> tuple[int, bytes]:
                async with session.post(url, data=uid.join(parts)) as resp:
                    return resp.status, await resp.read()

            await asyncio.gather(*(worker(w, send) for w in range(concurrency)))
    return {
        "ok": state["ok"],
        "errors": state["errors"],
        "issued": state["issued"],
        "finished": clock(),
        "samples": samples,
        "latencies_us": [round(x * 1e6) for x in latencies],
    }


def run_client_worker() -> int:
    """Protocol on stdin/stdout: spec JSON -> "ready"; "go T_START T_END" -> result JSON."""
    import uvloop

    spec = orjson.loads(sys.stdin.buffer.readline())
    if spec["client"] == "wrk":
        from wrkclient import drive_wrk

        sys.stdout.write("ready\n")
        sys.stdout.flush()
        go = sys.stdin.buffer.readline().split()
        if not go or go[0] != b"go":
            return 1
        result = drive_wrk(spec, float(go[1]), float(go[2]))
        sys.stdout.buffer.write(orjson.dumps(result) + b"\n")
        sys.stdout.flush()
        return 0
    import aiohttp  # noqa: F401 - imported before "ready" so its import time is not measured

    sys.stdout.write("ready\n")
    sys.stdout.flush()
    go = sys.stdin.buffer.readline().split()
    if not go or go[0] != b"go":
        return 1
    result = uvloop.run(_drive(spec, float(go[1]), float(go[2])))
    sys.stdout.buffer.write(orjson.dumps(result) + b"\n")
    sys.stdout.flush()
    return 0
