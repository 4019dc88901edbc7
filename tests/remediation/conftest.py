"""Fixtures for remediation tests: the fake API server and a real kubernetes_asyncio client pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.remediation.fakekube import FakeKube
from tests.remediation.kit import Clock, PromStandIn, serve
from xpuwatch.remediation.kube import Kube
from xpuwatch.remediation.settings import KubeSettings


@pytest.fixture
async def fake() -> AsyncIterator[FakeKube]:
    f = FakeKube()
    await f.start()
    yield f
    await f.stop()


@pytest.fixture
async def kube(fake: FakeKube) -> AsyncIterator[Kube]:
    k = await Kube.connect(KubeSettings(host=fake.url), instance="test-0")
    yield k
    await k.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def relay() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A relay channel that keeps what the controller posts to it (notices): (URL, received JSON bodies)."""
    got: list[dict[str, Any]] = []

    async def post(request: web.Request) -> web.Response:
        got.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/alertmanager/oncall", post)
    async with serve(app) as base:
        yield f"{base}/alertmanager/oncall", got


@pytest.fixture
async def prometheus() -> AsyncIterator[tuple[PromStandIn, str]]:
    """A PromStandIn on loopback: (stand-in, its base URL) for the controller's re-check."""
    prom = PromStandIn()
    app = web.Application()
    app.router.add_route("*", "/api/v1/query", prom.query)
    async with serve(app) as base:
        yield prom, base
