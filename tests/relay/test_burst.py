"""A burst of 2,000 alerts in 200 groups through the relay to each fake bot, under (shrunk) rate limits:
every message within the size limit, no rate-limit answer, every alert delivered exactly once."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter

import pytest

from alerts.relay import metrics as m
from alerts.relay.config import RateLimit
from tests.relay.fakebots import FakeBot, FakeFeishu, FakeWeCom
from tests.relay.harness import metric_value, settings_for, start_relay
from tests.relay.test_delivery import big_group

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
    assert summarised == metric_value(text, m.SUMMARISED, channel="ch")
    for body in fake.accepted:
        if kind == "wecom":
            assert len(body["markdown"]["content"].encode()) <= 4096
        else:
            assert len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()) <= 20 * 1024
