"""alerts/promapi.py: every answer is read strictly. A vector item that is not ``{"metric": {...}, "value":
[t, "v"]}`` (``null``, a string, a label that is not a string, a value that is not a number) is an error that
names what was read, never a series and never a crash. Over real HTTP on loopback (aiohttp server answering
as the Prometheus HTTP API document describes, prometheus.io/docs/prometheus/latest/querying/api/)."""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from xpuwatch.alerts.promapi import PromError, Prometheus, Series, duration


@pytest.fixture
async def prom() -> AsyncIterator[tuple[list[Any], str]]:
    """(the result list the next answer carries, base URL)."""
    result: list[Any] = []

    async def query(request: web.Request) -> web.Response:
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return web.Response(text=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield result, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_vector_reads_as_series(prom: tuple[list[Any], str]) -> None:
    result, url = prom
    result += [{"metric": {"alertname": "A", "node": "n1"}, "value": [1700000000.5, "1"]}]
    async with aiohttp.ClientSession() as session:
        got = await Prometheus(url, 5).ainstant(session, "ALERTS")
    assert got == [Series({"alertname": "A", "node": "n1"}, ((1700000000.5, 1.0),))]


@pytest.mark.parametrize(
    "item",
    [
        None,
        "x",
        {"metric": None, "value": [1, "1"]},
        {"metric": {"a": 1}, "value": [1, "1"]},
        {"metric": {}, "value": None},
        {"metric": {}, "value": [1]},
        {"metric": {}, "value": [1, 1]},
        {"metric": {}, "value": ["t", "1"]},
        {"metric": {}, "value": [1, "one"]},
        {"metric": {}},
    ],
)
async def test_an_unreadable_series_is_an_error(prom: tuple[list[Any], str], item: Any) -> None:
    result, url = prom
    result += [{"metric": {"alertname": "A"}, "value": [1, "1"]}, item]
    async with aiohttp.ClientSession() as session:
        with pytest.raises(PromError, match="Prometheus answered a series it cannot read: "):
            await Prometheus(url, 5).ainstant(session, "ALERTS")


def test_the_errors_name_the_caller_s_settings() -> None:
    prom = Prometheus("http://127.0.0.1:1", 0.5, 2**20, settings=("recheck.timeout_seconds", "the cap"))
    with pytest.raises(PromError, match=r"cannot reach Prometheus at http://127\.0\.0\.1:1"):
        prom.query("up", 0)
    assert "(the cap)" in str(prom._too_large())


def test_duration() -> None:
    assert duration("7d") == 604800 and duration("1h30m") == 5400 and duration("2w") == 1209600
    for bad in ("", "7", "1.5h", "-1d", "7days"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a duration like 7d"):
            duration(bad)
