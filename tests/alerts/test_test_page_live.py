"""Test pages through the site's own path: Debian's real Alertmanager 0.25 running the config generated from the
site spec, the relay (in process, the real app on loopback) and the DingTalk stand-in (tests/relay/fakebots.py,
which follows DingTalk's custom-robot document: token, signature, keyword, 20/min).

The sites of docs/alerts.md "Routing in your setup": DingTalk only with two robots and with one, no
remediation controller, and xpuwatch's fragment merged into an Alertmanager that routes other alerts. Each gets
a test page of every category delivered to the robot, and nothing fails: Alertmanager's
``alertmanager_notifications_failed_total`` and the relay's ``xpuwatch_relay_messages_failed_total`` /
``xpuwatch_relay_requests_rejected_total`` stay 0, the series XpuwatchAlertmanagerNotificationsFailing,
XpuwatchRelayMessagesFailing and XpuwatchRelayOutboxFailing read, so nothing pages about itself."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from tests.ports import free_port
from tests.relay.fakebots import FakeDingTalk
from tests.relay.harness import TOKEN, Harness, settings_for, start_relay
from xpuwatch.alerts.alertmanager import Endpoints, build_config, build_fragment, merge_fragment
from xpuwatch.alerts.spec import DEFAULT_SPEC_PATH, Spec, overlay, parse_spec
from xpuwatch.alerts.testpage import Answer, Target, run
from xpuwatch.exporter import catalog as C

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples" / "routing"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.access(ALERTMANAGER, os.X_OK), reason="Debian prometheus-alertmanager not installed"
    ),
]
# Only the waits shrink (a test cannot wait 2 minutes for the performance route); routes, receivers and
# inhibitions are the site's.
FAST = {
    "routing": {
        r: {"group_wait": "1s", "group_interval": "1s"}
        for r in ("hardware", "performance", "meta", "remediation")
    }
}


def site_spec(*files: str) -> Spec:
    doc = yaml.safe_load(DEFAULT_SPEC_PATH.read_text())
    for name in files:
        doc = overlay(doc, yaml.safe_load((EXAMPLES / name).read_text()), source=name)
    return parse_spec(overlay(doc, FAST))


def site_file(tmp: Path, name: str) -> Path:
    """The example site spec with :data:`FAST` merged in, as a file for the command line."""
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    for route, timing in FAST["routing"].items():
        doc["routing"].setdefault(route, {}).update(timing)
    path = tmp / "site.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class Stack:
    """What :func:`stack` started: Alertmanager's and the relay's base URLs, the robots by token, and what the
    sink received (path, webhook payload)."""

    am: str
    relay: Harness
    bots: dict[str, FakeDingTalk]
    sink: list[tuple[str, dict[str, Any]]]


async def _metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
        text = await r.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _total(metrics: Mapping[tuple[str, Any], float], name: str) -> float:
    return sum(v for (n, _), v in metrics.items() if n == name)


@asynccontextmanager
async def stack(tmp: Path, config: dict[str, Any], channels: Mapping[str, str]) -> AsyncIterator[Stack]:
    """A DingTalk stand-in per robot token, the relay with ``channels`` (relay channel -> robot token), a
    loopback sink, and Alertmanager running ``config``, whose URLs and token files name ``http://RELAY``,
    ``http://SINK`` and ``/TOKEN_FILE`` (see :data:`ENDPOINTS`), replaced here by the real ones."""
    bots = {token: FakeDingTalk(tokens={token}, keywords=["xpuwatch"]) for token in set(channels.values())}
    for bot in bots.values():
        await bot.start()
    relay = await start_relay(
        settings_for(
            tmp,
            {
                name: {"type": "dingtalk", "url": bots[t].url(t), "keyword": "xpuwatch"}
                for name, t in channels.items()
            },
            dedup_window_seconds=0,
        )
    )
    received: list[tuple[str, dict[str, Any]]] = []

    async def sink(request: web.Request) -> web.Response:
        received.append((request.path, await request.json()))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{path:.*}", sink)
    runner = web.AppRunner(app)
    await runner.setup()
    sink_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", sink_port).start()
    text = (
        yaml.safe_dump(config)
        .replace("http://RELAY", relay.url)
        .replace("http://SINK", f"http://127.0.0.1:{sink_port}")
    )
    (tmp / "relay-token").write_text(TOKEN)
    path = tmp / "alertmanager.yml"
    path.write_text(text.replace("/TOKEN_FILE", str(tmp / "relay-token")))
    port = free_port()
    log = open(tmp / "am.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={path}", f"--storage.path={tmp / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=debug"],
        stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s, asyncio.timeout(60):
            while True:
                try:
                    async with s.get(f"{base}/-/ready") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                assert proc.poll() is None, (tmp / "am.log").read_text()
                await asyncio.sleep(0.1)
        yield Stack(base, relay, bots, received)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
        await relay.close()
        await runner.cleanup()
        for bot in bots.values():
            await bot.stop()


ENDPOINTS = Endpoints(
    relay_url="http://RELAY",
    remediator_url="http://SINK/remediation",
    relay_credentials_file="/TOKEN_FILE",
    remediator_credentials_file="/TOKEN_FILE",
)


async def page(st: Stack, spec: Spec, via_alertmanager: bool = True, timeout: float = 60) -> list[Answer]:
    target = Target(st.am if via_alertmanager else "", st.relay.url, TOKEN, timeout)
    return await run(spec, target, "00112233445566778899aabb")


async def assert_nothing_failed(st: Stack, deliveries: int) -> None:
    """Every robot message accepted (firing, and through Alertmanager the resolved ones after), and none of
    the counters the meta alerts read moved."""
    async with asyncio.timeout(60):
        while sum(len(b.accepted) for b in st.bots.values()) < deliveries:
            await asyncio.sleep(0.1)
    await asyncio.sleep(2)  # a late failure (a retried resolved notification) would show by now
    am, relay = await _metrics(st.am), await _metrics(st.relay.url)
    assert _total(am, "alertmanager_notifications_failed_total") == 0
    assert _total(am, "alertmanager_notifications_total") >= 1
    assert _total(relay, C.RELAY_FAILED.name) == 0
    assert _total(relay, C.RELAY_REJECTED.name) == 0
    assert [c for b in st.bots.values() for c in b.codes()] == ["0"] * sum(
        len(b.answers) for b in st.bots.values()
    )


def texts(bot: FakeDingTalk) -> list[str]:
    return [m["markdown"]["text"] for m in bot.accepted]


def assert_all_ok(answers: list[Answer], hops: tuple[str, ...] = ("alertmanager", "relay", "bot")) -> None:
    assert [(a.category, a.hop) for a in answers if a.ok is not True] == [], [a.line() for a in answers]
    assert {(a.category, a.hop) for a in answers} == {
        (c, h) for c in ("hardware", "performance", "meta") for h in hops
    }


async def test_dingtalk_only_two_robots(tmp_path: Path) -> None:
    spec = site_spec("dingtalk-two-bots.yaml")
    channels = {"ops-dingtalk": "ops-robot", "team-dingtalk": "team-robot"}
    async with stack(tmp_path, build_config(spec, ENDPOINTS), channels) as st:
        answers = await page(st, spec)
        assert_all_ok(answers)
        lines = {(a.category, a.hop): a.text for a in answers}
        assert lines[("hardware", "alertmanager")] == "HTTP 200, active, receivers ops-dingtalk"
        assert lines[("meta", "alertmanager")] == "HTTP 200, active, receivers xpuwatch-meta"
        assert lines[("performance", "relay")] == "channel team-dingtalk: notification stored"
        assert (
            lines[("hardware", "bot")] == "channel ops-dingtalk: message 1/1 delivered, bot answered code 0"
        )
        await assert_nothing_failed(st, deliveries=6)  # 3 firing + 3 resolved
        ops, team = st.bots["ops-robot"], st.bots["team-robot"]
        assert len(ops.accepted) == 2 and len(team.accepted) == 4  # performance and meta on the team robot
        assert (
            "XpuwatchTestPageHardware" in texts(ops)[0] and "FIRING" in ops.accepted[0]["markdown"]["title"]
        )
        assert st.sink == []  # the remediation controller got nothing: action=none


async def test_dingtalk_only_one_robot_also_straight_to_the_relay(tmp_path: Path) -> None:
    spec = site_spec("dingtalk-one-bot.yaml")
    async with stack(tmp_path, build_config(spec, ENDPOINTS), {"ops-dingtalk": "the-robot"}) as st:
        assert_all_ok(await page(st, spec))
        await assert_nothing_failed(st, deliveries=6)
        # without Alertmanager (--alertmanager-url not given): the relay's own answer, then the bot's
        direct = await run(spec, Target("", st.relay.url, TOKEN, 60), "ffeeddccbbaa99887766")
        assert_all_ok(direct, hops=("relay", "bot"))
        assert {a.text for a in direct if a.hop == "relay"} == {"channel ops-dingtalk: HTTP 200 queued"}
        await assert_nothing_failed(st, deliveries=9)


async def test_without_a_remediation_controller(tmp_path: Path) -> None:
    spec = site_spec("dingtalk-two-bots.yaml", "no-remediation.yaml")
    config = build_config(spec, ENDPOINTS)
    assert "remediat" not in yaml.safe_dump(config)
    async with stack(tmp_path, config, {"ops-dingtalk": "ops-robot", "team-dingtalk": "team-robot"}) as st:
        assert_all_ok(await page(st, spec))
        # a real hardware fault with action=drain: people get it, nothing tries an absent controller
        fault = {
            "labels": {"alertname": "AcceleratorEccUncorrectable", "category": "hardware", "severity": "critical",
                       "action": "drain", "node": "n1", "uuid": "GPU-1", "device": "1"},
            "annotations": {"summary": "ECC uncorrectable on n1 device 1"},
        }  # fmt: skip
        async with aiohttp.ClientSession() as s, s.post(f"{st.am}/api/v2/alerts", json=[fault]) as r:
            assert r.status == 200
        await assert_nothing_failed(st, deliveries=7)
        assert any("AcceleratorEccUncorrectable" in t for t in texts(st.bots["ops-robot"]))


async def test_the_fragment_in_the_sites_own_alertmanager(tmp_path: Path) -> None:
    spec = site_spec("dingtalk-two-bots.yaml")
    existing = yaml.safe_load((EXAMPLES / "existing-alertmanager.yml").read_text())
    for receiver in existing["receivers"]:  # the site's own receivers at a loopback sink
        receiver["webhook_configs"] = [{"url": f"http://SINK/{receiver['name']}"}]
    existing["route"]["group_wait"] = "1s"  # the site's own routes answer within the test too
    merged = merge_fragment(existing, build_fragment(spec, ENDPOINTS))
    async with stack(tmp_path, merged, {"ops-dingtalk": "ops-robot", "team-dingtalk": "team-robot"}) as st:
        own = {"labels": {"alertname": "NodeDown", "severity": "critical", "instance": "db-1"}}
        async with aiohttp.ClientSession() as s, s.post(f"{st.am}/api/v2/alerts", json=[own]) as r:
            assert r.status == 200
        assert_all_ok(await page(st, spec))
        await assert_nothing_failed(st, deliveries=6)
        # the site's critical alert went where it always went, and nowhere near the robots
        assert [(p, [a["labels"]["alertname"] for a in b["alerts"]]) for p, b in st.sink] == [
            ("/ops-pager", ["NodeDown"])
        ]
        assert not any("NodeDown" in t for b in st.bots.values() for t in texts(b))


async def test_a_receiver_without_a_channel_shows_where_it_breaks(tmp_path: Path) -> None:
    """The fault of the issue: receivers renamed, relay channels not. Alertmanager 0.25 counts the 404 under
    `integration` alone (no receiver_name, no reason: those came in 0.26/0.27); the test page says which hop."""
    spec = site_spec("dingtalk-two-bots.yaml")
    async with stack(tmp_path, build_config(spec, ENDPOINTS), {"team-dingtalk": "team-robot"}) as st:
        answers = await page(st, spec, timeout=8)
        bad = {a.category: a.text for a in answers if a.ok is False}
        assert set(bad) == {"hardware"}
        # Alertmanager sends the failed group again at every group_interval (1 s here), the relay refuses each
        assert re.search(
            r"refused \d+ \(unknown_channel\): a receiver without a relay channel", bad["hardware"]
        )
        async with asyncio.timeout(60):
            while _total(await _metrics(st.am), "alertmanager_notifications_failed_total") < 1:
                await asyncio.sleep(0.2)
        failed = [labels for (n, labels), v in (await _metrics(st.am)).items()
                  if n == "alertmanager_notifications_failed_total" and v > 0]  # fmt: skip
        assert failed == [(("integration", "webhook"),)]


async def test_the_cli_prints_each_hop_and_exits_0(tmp_path: Path) -> None:
    spec_file = site_file(tmp_path, "dingtalk-one-bot.yaml")
    spec = site_spec("dingtalk-one-bot.yaml")
    token = tmp_path / "token-for-cli"
    token.write_text(TOKEN + "\n")
    async with stack(tmp_path, build_config(spec, ENDPOINTS), {"ops-dingtalk": "the-robot"}) as st:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "xpuwatch", "rules", "test-page", "--spec", str(spec_file),
            "--alertmanager-url", st.am, "--relay-url", st.relay.url, "--relay-credentials-file", str(token),
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, out.decode() + err.decode()
        lines = out.decode().splitlines()
        assert lines[0].startswith("test page ") and lines[0].endswith(f"through Alertmanager {st.am}")
        assert "hardware     alertmanager  ok    HTTP 200, active, receivers ops-dingtalk" in lines
        assert (
            "performance  bot           ok    channel ops-dingtalk: message 1/1 delivered, bot answered code 0"
            in lines
        )
        assert len(lines) == 1 + 9
        # without --alertmanager-url: straight to the relay channels the site spec names
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "xpuwatch", "rules", "test-page", "--spec", str(spec_file),
            "--relay-url", st.relay.url, "--relay-credentials-file", str(token),
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, out.decode() + err.decode()
        lines = out.decode().splitlines()
        assert "hardware     relay         ok    channel ops-dingtalk: HTTP 200 queued" in lines
        assert len(lines) == 1 + 6
