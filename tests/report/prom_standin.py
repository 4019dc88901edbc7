"""A stand-in Prometheus HTTP API that answers too much or too slowly, over real HTTP on loopback (aiohttp).

It stands for a Prometheus at the ``/api/v1/query`` and ``/api/v1/query_range`` boundary as the Prometheus
HTTP API document describes it (https://prometheus.io/docs/prometheus/latest/querying/api/: a JSON body
``{"status": "success", "data": {"resultType": "vector", "result": [...]}}``), and misbehaves in the ways a
real one can under a query over millions of series: ``mode="huge"`` streams a vector of ever more series
(chunked, no Content-Length) up to ``limit`` bytes; ``mode="declared"`` announces a 10 GiB Content-Length;
``mode="slow"`` sends the answer one byte every ``pause`` seconds, each byte well within any read timeout;
``mode="hold"`` answers a one-series vector (value: the ``query`` form field's length) after ``pause``
seconds, counting the queries in flight at once (``most_in_flight``), as a busy Prometheus evaluating
each query on a core of its own would; a query of ``refuse`` it answers 400 with a JSON error.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

HEAD = b'{"status":"success","data":{"resultType":"vector","result":['


def _series(i: int) -> bytes:
    labels = {
        "__name__": "accelerator_utilization_ratio",
        "node": f"gpu-node-{i // 8}",
        "uuid": f"GPU-{i:032x}",
    }
    return json.dumps({"metric": labels, "value": [1700000000, "0.5"]}).encode() + b","


class StandIn:
    def __init__(self, mode: str, limit: int = 256 * 2**20, pause: float = 0.1) -> None:
        self.mode, self.limit, self.pause = mode, limit, pause
        self.sent = 0  # bytes of answer body written, all requests together
        self.in_flight = self.most_in_flight = 0
        self.queries: list[str] = []

    async def hold(self, request: web.Request) -> web.Response:
        form = await request.post()
        query = str(form.get("query", ""))
        self.queries.append(query)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.pause)
        finally:
            self.in_flight -= 1
        if query == "refuse":
            err = {"status": "error", "errorType": "bad_data", "error": "parse error at char 1"}
            return web.json_response(err, status=400)
        value = {"metric": {"q": query}, "value": [1700000000, str(len(query))]}
        values = {"metric": {"q": query}, "values": [[1700000000, str(len(query))]]}
        kind, one = ("matrix", values) if request.path.endswith("_range") else ("vector", value)
        return web.json_response({"status": "success", "data": {"resultType": kind, "result": [one]}})

    async def answer(self, request: web.Request) -> web.StreamResponse:
        if self.mode == "hold":
            return await self.hold(request)
        await request.read()
        if self.mode == "declared":
            resp = web.StreamResponse(
                headers={"Content-Type": "application/json", "Content-Length": str(10 << 30)}
            )
            await resp.prepare(request)
            await resp.write(HEAD)
            self.sent += len(HEAD)
            for _ in range(600):  # never sends the rest; waits at most 30 s for the client to leave
                if request.transport is None or request.transport.is_closing():
                    break
                await asyncio.sleep(0.05)
            return resp
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            if self.mode == "huge":
                block = b"".join(_series(i) for i in range(1000))
                await resp.write(HEAD)
                while self.sent < self.limit:
                    await resp.write(block)
                    self.sent += len(block)
            else:  # slow: one byte at a time, forever (until the client leaves or ``limit``)
                body = HEAD + _series(0) * 1000
                for i in range(min(len(body), self.limit)):
                    await resp.write(body[i : i + 1])
                    self.sent += 1
                    await asyncio.sleep(self.pause)
        except (ConnectionResetError, ConnectionError):
            pass
        return resp


@contextmanager
def serve(standin: StandIn) -> Iterator[str]:
    """Run ``standin`` on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/api/v1/query", standin.answer)
    app.router.add_post("/api/v1/query_range", standin.answer)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
