"""A loopback round-robin TCP proxy: the Service in front of two `serve` replicas, as kube-proxy
spreads connections over a Deployment's endpoints. TLS passes through untouched. A backend that
refuses the connection (a replica that has stopped listening) is skipped for the next one."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading

from tests.e2e.cluster import free_port


class RoundRobin:
    def __init__(self, backends: list[int]) -> None:
        self.backends = list(backends)
        self.port = free_port()
        self._turn = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RoundRobin:
        self._thread.start()
        assert self._ready.wait(10), "the proxy did not start listening"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stopping is not None
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)
        assert not self._thread.is_alive(), "the proxy did not stop"

    def _run(self) -> None:
        # asyncio.run: the connections still piped are cancelled (each closes its sockets) and
        # the loop is closed when the proxy stops, so nothing of it outlives the test.
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()  # no new connections; asyncio.run then cancels the open ones

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = None
        for _ in range(len(self.backends)):
            port = self.backends[next(self._turn) % len(self.backends)]
            with contextlib.suppress(OSError):
                upstream = await asyncio.open_connection("127.0.0.1", port)
                break
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer = upstream

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(OSError):
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
