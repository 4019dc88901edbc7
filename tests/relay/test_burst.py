"""A burst of 2,000 alerts in 200 groups through the relay to each fake bot, under (shrunk) rate limits:
every message within the size limit, no rate-limit answer, every alert delivered exactly once."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter

import pytest

from tests.relay.fakebots import FakeBot, FakeDingTalk, FakeFeishu, FakeWeCom
from tests.relay.harness import metric_value, settings_for, start_relay
from tests.relay.test_delivery import big_group
from xpuwatch.alerts.relay.config import RateLimit
from xpuwatch.exporter import catalog as C

GROUPS, PER_GROUP = 200, 10
# The documented limits with windows shrunk 200x (20/60 s -> 20/0.3 s; 5/1 s + 100/60 s -> 5/5 ms + 100/0.3 s):
# the same shape, so the same packing and pacing logic runs, in seconds instead of minutes.
WECOM_LIMITS = (RateLimit(20, 0.3),)
FEISHU_LIMITS = (RateLimit(5, 0.005), RateLimit(100, 0.3))


def burst() -> list[dict]:
    groups = []
    for g in range(GROUPS):
        doc = big_group(PER_GROUP, group=f"g{g:03d}")
        doc["groupKey"] = f'{{}}:{{alertname="AcceleratorEccUncorrectable", node="n{g:03d}"}}'
        groups.append(doc)
    return groups


def alert_ids(body: dict) -> list[str]:
    return sorted(set(re.findall(r"GPU-g\d{3}-\d{4}", json.dumps(body))))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wecom", "feishu"])
async def test_burst_2000_alerts_200_groups_nothing_lost_nothing_duplicated(tmp_path, kind):
    fake: FakeBot
    if kind == "wecom":
        fake = FakeWeCom(limits=WECOM_LIMITS)
        limits = [{"count": lim.count, "per_seconds": lim.per_seconds} for lim in WECOM_LIMITS]
    else:
        fake = FakeFeishu(limits=FEISHU_LIMITS, secret="s")
        limits = [{"count": lim.count, "per_seconds": lim.per_seconds} for lim in FEISHU_LIMITS]
    await fake.start()
    channel = {"type": kind, "url": fake.url(), "rate_limits": limits, "max_parts": 10}  # type: ignore[attr-defined]
    if kind == "feishu":
        channel["secret"] = "s"
    h = await start_relay(settings_for(tmp_path, {"ch": channel}))
    try:
        sem = asyncio.Semaphore(20)  # Alertmanager flushes groups concurrently

        async def post(doc: dict) -> int:
            async with sem:
                return (await h.post("ch", doc))[0]

        statuses = await asyncio.gather(*(post(d) for d in burst()))
        assert statuses == [200] * GROUPS
        await h.settle(timeout=120)
        rows = h.relay.outbox.messages()
        text = (await h.get("/metrics"))[1]
    finally:
        await h.close()
        await fake.stop()
    assert set(fake.codes()) == {"0"}, Counter(
        fake.codes()
    )  # never 45009 / 9499 / 11232 / 40058: within limits and sizes
    assert {r["state"] for r in rows} == {"delivered"}
    assert len(fake.accepted) == len(rows)
    seen = Counter(a for body in fake.accepted for a in alert_ids(body))
    text_of = [json.dumps(body, ensure_ascii=False) for body in fake.accepted]
    summarised = sum(int(n) for t in text_of for n in re.findall(r"… (\d+) more alerts", t))
    assert len(seen) + summarised == GROUPS * PER_GROUP  # nothing lost: each alert listed or counted
    assert set(seen.values()) == {1}  # nothing duplicated
    assert summarised == metric_value(text, C.RELAY_SUMMARISED.name, channel="ch")
    for body in fake.accepted:
        if kind == "wecom":
            assert len(body["markdown"]["content"].encode()) <= 4096
        else:
            assert len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()) <= 20 * 1024


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wecom", "feishu", "dingtalk"])
async def test_no_rejection_when_the_bot_counts_as_late_as_it_can(tmp_path, kind):
    """The stand-in waits a varying 0-60 ms between receiving a request and counting it, then answers at
    once: the latest moment a bot can count a request. A relay that counted a send at request start (or at
    start plus a margin under 60 ms) would see the slow counts of one window overlap the fast ones of the next
    and draw 45009 / 9499 / 130101 (it does: checked by making the sender count at start + 20 ms); the relay
    counts at the answer and draws none."""
    draw = random.Random(13)

    def late() -> float:
        return draw.choice((0.0, 0.0, 0.06, 0.03, 0.0, 0.045))

    limits = {  # short enough for a test, long enough that a window fills before it ends
        "wecom": (RateLimit(20, 1.0),),
        "feishu": (RateLimit(5, 0.2), RateLimit(100, 2.0)),
        "dingtalk": (RateLimit(20, 1.0),),
    }[kind]
    fake: FakeBot = {"wecom": FakeWeCom, "feishu": FakeFeishu, "dingtalk": FakeDingTalk}[kind](
        limits=limits, count_delay=late
    )
    await fake.start()
    channel = {
        "type": kind,
        "url": fake.url(),  # type: ignore[attr-defined]
        "rate_limits": [{"count": lim.count, "per_seconds": lim.per_seconds} for lim in limits],
        "max_parts": 1,
    }
    messages = {"wecom": 60, "feishu": 40, "dingtalk": 60}[kind]
    h = await start_relay(settings_for(tmp_path, {"ch": channel}))
    try:
        for g in range(messages):
            doc = big_group(1, group=f"late{g:03d}")
            doc["groupKey"] = f'{{}}:{{node="late{g:03d}"}}'
            assert (await h.post("ch", doc))[0] == 200
        await h.settle(timeout=120)
    finally:
        await h.close()
        await fake.stop()
    assert fake.codes() == ["0"] * messages
    assert len(fake.accepted) == messages
