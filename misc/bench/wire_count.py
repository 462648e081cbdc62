"""A loopback proxy that counts what a PostgreSQL client asks of the server.

``pg_bench.py`` points one worker at it to count round trips per job. A
round trip is a request (a simple ``Query`` or an extended-protocol ``Sync``)
sent while no earlier request awaits its ``ReadyForQuery``: pipelined
statements share one. Statements are ``Query`` and ``Bind`` messages. The
method is the shared peer harness's (``../shared/bench/worker_peers.py``), so
the figures compare.
"""

from __future__ import annotations

import asyncio
import collections
import threading


class WireCounter:
    """``with WireCounter(host, port) as proxy:`` connect to ``proxy.port``."""

    SSL_REQUEST, GSS_REQUEST = 80877103, 80877104

    def __init__(self, host: str, port: int):
        self.upstream = (host, port)
        self.counts: collections.Counter[str] = collections.Counter()
        self.port: int | None = None
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WireCounter:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the counting proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def snapshot(self) -> collections.Counter[str]:
        with self._lock:
            return collections.Counter(self.counts)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        sreader, swriter = await asyncio.open_connection(*self.upstream)
        state = {"outstanding": 0, "one_byte_replies": 0}
        pumps = [
            asyncio.create_task(self._pump(creader, swriter, state, client=True)),
            asyncio.create_task(self._pump(sreader, cwriter, state, client=False)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            for writer in (cwriter, swriter):
                writer.close()

    async def _pump(self, reader, writer, state: dict, *, client: bool) -> None:
        buf = bytearray()
        startup = client  # a client's first messages have no type byte
        while data := await reader.read(65536):
            writer.write(data)
            buf += data
            with self._lock:
                while True:
                    if startup:
                        if len(buf) < 8 or len(buf) < int.from_bytes(buf[:4], "big"):
                            break
                        size, code = int.from_bytes(buf[:4], "big"), int.from_bytes(buf[4:8], "big")
                        del buf[:size]
                        if code in (self.SSL_REQUEST, self.GSS_REQUEST):
                            state["one_byte_replies"] += 1  # answered 'N', untyped
                        else:
                            startup = False
                        continue
                    if not client and state["one_byte_replies"]:
                        if not buf:
                            break
                        del buf[:1]
                        state["one_byte_replies"] -= 1
                        continue
                    if len(buf) < 5 or len(buf) < 1 + int.from_bytes(buf[1:5], "big"):
                        break
                    kind = chr(buf[0])
                    del buf[: 1 + int.from_bytes(buf[1:5], "big")]
                    self._count(kind, state, client)
            await writer.drain()

    def _count(self, kind: str, state: dict, client: bool) -> None:
        if client:
            if kind in "QS":
                if state["outstanding"] == 0:
                    self.counts["round_trips"] += 1
                state["outstanding"] += 1
            if kind in "QB":
                self.counts["statements"] += 1
        elif kind == "Z" and state["outstanding"]:
            state["outstanding"] -= 1
