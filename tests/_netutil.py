"""Network helpers for tests: free ports and a loopback TCP proxy the test can cut and restore."""

from __future__ import annotations

import asyncio
import contextlib
import socket

__all__ = ["TcpProxy", "free_port"]


def free_port() -> int:
    """A TCP port nobody listens on right now (on 127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TcpProxy:
    """``127.0.0.1:<port>`` -> ``upstream``, in the test's own event loop.

    ``down()`` stops listening and aborts every proxied connection (the client sees a reset, new
    connections are refused: the service "went away"); ``up()`` listens again on the same port.
    ``hang()`` keeps every connection open and accepts new ones but forwards nothing, either way (a
    network partition, a broker blocked on a full disk); ``resume()`` forwards again, what was held
    back included. ``pace(rate)`` forwards what the client sends at ``rate`` bytes a second, in
    small steps (a slow link: every request reaches the service, late, none after a long silence).
    """

    PACE_STEP = 0.02  # seconds between the paced chunks

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._pace: float | None = None

    def pace(self, rate: float | None) -> None:
        """Forward client -> upstream at ``rate`` bytes a second (None: as fast as it comes)."""
        self._pace = rate

    def hang(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def __aenter__(self) -> TcpProxy:
        await self.up()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.down()

    async def up(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def down(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        if server is not None:
            await server.wait_closed()

    def _chunk(self) -> int:
        return 65536 if self._pace is None else max(1, int(self._pace * self.PACE_STEP))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        for src, dst, paced in ((reader, up_writer, True), (up_reader, writer, False)):
            task = asyncio.create_task(self._pipe(src, dst, paced), name="tcp-proxy-pipe")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, paced: bool) -> None:
        try:
            while data := await src.read(self._chunk() if paced else 65536):
                if paced and self._pace is not None:
                    await asyncio.sleep(self.PACE_STEP)
                await self._flowing.wait()
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            dst.transport.abort()
            self._writers.discard(dst)
