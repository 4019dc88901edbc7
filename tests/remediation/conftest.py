"""Fixtures for remediation tests: the fake API server and a real kubernetes_asyncio client pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from remediation.kube import Kube
from remediation.settings import KubeSettings
from tests.remediation.fakekube import FakeKube
from tests.remediation.kit import Clock


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
