"""alerts/promapi.py: every answer is read strictly. A vector item that is not ``{"metric": {...}, "value":
[t, "v"]}`` (``null``, a string, a label that is not a string, a value that is not a number) is an error that
names what was read, never a series and never a crash. Over real HTTP on loopback (aiohttp server answering
as the Prometheus HTTP API document describes, prometheus.io/docs/prometheus/latest/querying/api/)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from xpuwatch.alerts import promapi
from xpuwatch.alerts.promapi import PromError, Prometheus, Series, Unreadable, duration


@contextlib.asynccontextmanager
async def serving(answer: Callable[[], bytes]) -> AsyncIterator[str]:
    """A stand-in Prometheus on loopback whose /api/v1/query answers ``answer()``; yields its base URL."""

    async def query(request: web.Request) -> web.Response:
        return web.Response(body=answer(), content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def prom() -> AsyncIterator[tuple[list[Any], str]]:
    """(the result list the next answer carries, base URL)."""
    result: list[Any] = []

    def answer() -> bytes:
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    async with serving(answer) as url:
        yield result, url


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


@pytest.fixture
async def answers() -> AsyncIterator[tuple[dict[str, bytes], str]]:
    """(the raw body the next answer carries, under key "body"; base URL)."""
    state = {"body": b""}
    async with serving(lambda: state["body"]) as url:
        yield state, url


VECTOR = [{"metric": {"node": f"n{i}"}, "value": [1, "1"]} for i in range(3)]


@pytest.mark.parametrize(
    "body",
    [
        # members in any order, whitespace anywhere, members the client does not know
        b'{"data": {"result": RESULT, "resultType": "vector"}, "status": "success"}',
        b' \n{ "status" : "success" , "warnings": ["w"], "data" : { "resultType" : "vector" ,\t"result" : RESULT } } \r\n',
        b'{"status":"success","isPartial":false,"data":{"resultType":"vector","result":RESULT}}',  # VictoriaMetrics
    ],
)
async def test_any_layout_of_the_api_envelope_reads(
    answers: tuple[dict[str, bytes], str], body: bytes
) -> None:
    state, url = answers
    state["body"] = body.replace(b"RESULT", json.dumps(VECTOR).encode())
    async with aiohttp.ClientSession() as session:
        got = await Prometheus(url, 5).ainstant(session, "up")
    assert [s.labels["node"] for s in got] == ["n0", "n1", "n2"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            b'{"status":"success","data":{"resultType":"vector","result":[]}} x',
            "did not answer with Prometheus API JSON",
        ),
        (
            b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{}',
            "did not answer with Prometheus",
        ),
        (b'{"status":"success","data":null}', "unexpected answer shape"),
        (b'{"status":"success","data":{"result":{"a":1}}}', "unexpected answer shape"),
        (
            b'{"status":"success","data":{"result":[[[[' + b"[" * 100_000,
            "did not answer with Prometheus API JSON",
        ),
        (
            b'{"status":"success","data":{"result":[{"metric":{},"value":[1' + b"0" * 400 + b',"1"]}]}}',
            "cannot read",
        ),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"status":"error","error":"bad"}', "Prometheus at http"),
        (b"<html>proxy login</html>", "did not answer with Prometheus API JSON"),
    ],
)
async def test_an_unreadable_answer_is_one_clear_error(
    answers: tuple[dict[str, bytes], str], body: bytes, reason: str
) -> None:
    state, url = answers
    state["body"] = body
    async with aiohttp.ClientSession() as session:
        with pytest.raises(PromError, match=reason) as err:
            await Prometheus(url, 5).ainstant(session, "up")
    assert isinstance(err.value, Unreadable) == ("error" not in body.decode(errors="replace"))


async def test_decoding_runs_off_the_event_loop(
    answers: tuple[dict[str, bytes], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each series is read while a coroutine on the loop answers it: were decoding on the loop, the
    coroutine could not run and the wait would end in an error."""
    state, url = answers
    state["body"] = json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": VECTOR}}
    ).encode()
    asked, told = threading.Event(), threading.Event()
    read = promapi._instant

    def item(r: Any) -> Series:
        asked.set()
        assert told.wait(30), "the event loop did not run while a series was decoded"
        told.clear()
        return read(r)

    async def answer() -> None:
        for _ in VECTOR:
            while not asked.is_set():
                await asyncio.sleep(0.01)
            asked.clear()
            told.set()

    monkeypatch.setattr(promapi, "_instant", item)
    async with aiohttp.ClientSession() as session:
        helper = asyncio.create_task(answer())
        got = await Prometheus(url, 30).ainstant(session, "up")
        await helper
    assert len(got) == 3


async def test_the_deadline_covers_decoding(
    answers: tuple[dict[str, bytes], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails on main: the timeout ended with the download, so a slow decode ran on (report --timeout 20 took
    87.5 s). Here the download is instant and decoding 50 series would take 10 s: the query fails at its
    1 s deadline, and the decoding thread stops at its next series instead of reading the rest."""
    state, url = answers
    many = [{"metric": {"node": f"n{i}"}, "value": [1, "1"]} for i in range(50)]
    state["body"] = json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": many}}
    ).encode()
    read, seen = promapi._instant, []

    def slow(r: Any) -> Series:
        time.sleep(0.2)
        seen.append(r)
        return read(r)

    monkeypatch.setattr(promapi, "_instant", slow)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(
            PromError, match=r"no complete answer within 1 s, decoding included \(--timeout\)"
        ):
            await Prometheus(url, 1).ainstant(session, "up")
    await asyncio.sleep(0.6)  # the thread finishes the series it was on, then stops
    assert len(seen) < 50
