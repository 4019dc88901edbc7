"""Fixtures for remediation tests: the fake API server and a real kubernetes_asyncio client pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from remediation.kube import Kube
from remediation.settings import KubeSettings

from .fakekube import FakeKube


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
