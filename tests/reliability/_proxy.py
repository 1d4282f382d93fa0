"""A loopback TCP proxy that the tests can stall (a network that stops delivering) and resume."""

from __future__ import annotations

import asyncio
import contextlib


class StallingProxy:
    """Forwards 127.0.0.1:<port> to ``target``; `stall` holds every byte until `resume`.

    While stalled, connections stay open and new ones are accepted, but nothing is delivered in
    either direction: what a client sees when a switch or NAT silently drops traffic. Bytes sent
    meanwhile are delivered, in order, on `resume` (so a statement sent during a stall can still
    reach the server and take effect late).
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.stalls = 0
        self.connections = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def stall(self) -> None:
        self.stalls += 1
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                await self._open.wait()
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                dst.close()

    async def close(self) -> None:
        self.resume()
        if self._server is not None:
            self._server.close()
        for w in self._writers:
            w.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
