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
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def __enter__(self) -> RoundRobin:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port)
        )
        self._ready.set()
        self._loop.run_forever()
        self._server.close()

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
