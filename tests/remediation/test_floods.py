"""The real ``xpuwatch remediate`` process (against the fake API server) under connection floods on
loopback (exporter.listener's guard, issue 21): the webhook keeps answering during an idle keep-alive
flood with slow partial requests, and with 1,100 idle connections under a 1,024 open-file limit, with a
small log. Each fails on main: the controller's listener had no guard. The flood runs in a thread so
that the fake API server (in this event loop) keeps answering the controller."""

from __future__ import annotations

import asyncio
import json
import resource
from pathlib import Path

import pytest

from tests.flood import Child, Dribbler, close_all, idle_keepalive, metric, start_child, summary, timed
from tests.ports import free_port
from tests.remediation.test_cli import write_config

pytestmark = pytest.mark.slow
EMPTY = json.dumps({"version": "4", "groupKey": "{}:{}", "alerts": []}).encode()  # parsed, answered 200


def needs_fds(n: int) -> None:
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < n:
        pytest.skip(f"the test process itself needs ~{n} file descriptors")


def webhook(child: Child) -> float:
    return timed(
        f"http://{child.host}:{child.port}/alertmanager/remediate",
        EMPTY,
        {"Authorization": "Bearer cli-token", "Content-Type": "application/json"},
    )


async def controller(tmp: Path, kube_url: str, nofile: int = 0) -> Child:
    port = free_port()
    cfg = write_config(tmp, kube_url, port)
    return await asyncio.to_thread(
        start_child,
        ["remediate", "--config", str(cfg)],
        tmp / "log",
        None,
        nofile,
        0,
        {"FLOOD_PORT": str(port)},
    )


async def test_webhook_answers_during_an_idle_flood_with_slow_partial_requests(
    tmp_path, fake, capsys
) -> None:  # type: ignore[no-untyped-def]
    needs_fds(1400)
    child = await controller(tmp_path, fake.url)

    def flood() -> tuple[list[float], list[float], float]:
        socks = idle_keepalive(child.host, child.port, 600)
        try:
            idle = [webhook(child) for _ in range(20)]
            dribbler = Dribbler(socks)
            dribbler.start()
            try:
                slow = [webhook(child) for _ in range(20)]
            finally:
                dribbler.stop()
            evicted = metric(
                child.host, child.port, "xpuwatch_http_connections_closed_total", reason="evicted"
            )
        finally:
            close_all(socks)
        return idle, slow, evicted

    try:
        idle, slow, evicted = await asyncio.to_thread(flood)
    finally:
        await asyncio.to_thread(child.stop)
    with capsys.disabled():
        print(f"\nremediation webhook during 600 idle keep-alive connections: {summary(idle)}")
        print(f"remediation webhook while they send partial second requests: {summary(slow)}")
    assert max(idle + slow) < 5.0
    assert evicted >= 600 - 512  # the cap held: the longest-idle connections gave way


async def test_1100_idle_connections_under_a_1024_fd_limit(tmp_path, fake, capsys) -> None:  # type: ignore[no-untyped-def]
    needs_fds(1400)
    child = await controller(tmp_path, fake.url, nofile=1024)

    def flood() -> list[float]:
        socks = idle_keepalive(child.host, child.port, 1100)
        try:
            return [webhook(child) for _ in range(10)]
        finally:
            close_all(socks)

    try:
        times = await asyncio.to_thread(flood)
        assert child.proc.poll() is None
    finally:
        await asyncio.to_thread(child.stop)
    with capsys.disabled():
        print(f"\nremediation webhook during 1,100 idle connections, nofile 1024: {summary(times)}")
    assert max(times) < 5.0
    text = "".join(x for x in child.text().splitlines(True) if "logger=aiohttp.access" not in x)
    assert text.count("out of system resource") == 0, text[-2000:]
    assert len(text) < 10_000, text[-2000:]
