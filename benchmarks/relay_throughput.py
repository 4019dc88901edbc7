"""Relay benchmark: ingest throughput (alerts/s into the durable outbox) and delivery time of a 2,000-alert
burst (200 groups) under the bots' rate limits, against the theoretical minimum those limits allow.

Runs the relay in-process over real HTTP and SQLite (synchronous=FULL) against the fake bots from
tests/relay/fakebots.py. Rate-limit windows are shrunk by --scale (default 100x) so the run takes seconds;
times are printed both as measured and scaled back to real windows.

    PYTHONPATH=$PWD python benchmarks/relay_throughput.py [--scale 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.relay import feishu, wecom
from alerts.relay.config import RateLimit
from alerts.relay.limiter import SlidingWindowLimiter
from tests.relay.fakebots import FakeBot, FakeFeishu, FakeWeCom
from tests.relay.harness import Harness, settings_for, start_relay
from tests.relay.test_delivery import big_group


def burst(groups: int, per_group: int) -> list[dict]:
    docs = []
    for g in range(groups):
        doc = big_group(per_group, group=f"g{g:04d}")
        doc["groupKey"] = f'{{}}:{{node="n{g:04d}"}}'
        docs.append(doc)
    return docs


def minimum_seconds(limits: tuple[RateLimit, ...], messages: int) -> float:
    """Time from the first to the last of ``messages`` sends when every window is used to the full."""
    lim, now, sent = SlidingWindowLimiter(limits), 0.0, 0
    while sent < messages:
        wait = lim.delay(now)
        if wait > 0:
            now += wait
            continue
        lim.record(now)
        sent += 1
    return now


async def post_all(h: Harness, docs: list[dict], concurrency: int = 20) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(doc: dict) -> None:
        async with sem:
            status, _ = await h.post("ch", doc)
            assert status == 200, status

    await asyncio.gather(*(one(d) for d in docs))


def scaled(limits: tuple[RateLimit, ...], scale: float) -> tuple[RateLimit, ...]:
    return tuple(RateLimit(lim.count, lim.per_seconds / scale) for lim in limits)


async def relay_with(
    tmp: Path, fake: FakeBot, kind: str, limits: tuple[RateLimit, ...], **ch: object
) -> Harness:
    channel = {
        "type": kind,
        "url": fake.url(),  # type: ignore[attr-defined]
        "rate_limits": [{"count": x.count, "per_seconds": x.per_seconds} for x in limits],
        **ch,
    }
    return await start_relay(settings_for(tmp, {"ch": channel}))


async def ingest(groups: int, per_group: int) -> tuple[float, int]:
    """Seconds to get ``groups`` notifications answered 200 (stored in the outbox) while the bot hangs."""
    with tempfile.TemporaryDirectory() as tmp:
        fake = FakeWeCom(stall_after=0)
        await fake.start()
        h = await relay_with(Path(tmp), fake, "wecom", wecom.LIMITS, max_parts=10)
        docs = burst(groups, per_group)
        t0 = time.perf_counter()
        await post_all(h, docs)
        elapsed = time.perf_counter() - t0
        stored = sum(s.pending for s in h.relay.outbox.stats())
        await h.close()
        await fake.stop()
    return elapsed, stored


async def delivery(kind: str, scale: float) -> dict[str, float]:
    real = wecom.LIMITS if kind == "wecom" else feishu.LIMITS
    limits = scaled(real, scale)
    with tempfile.TemporaryDirectory() as tmp:
        fake: FakeBot = FakeWeCom(limits=limits) if kind == "wecom" else FakeFeishu(limits=limits)
        await fake.start()
        h = await relay_with(Path(tmp), fake, kind, limits)
        t0 = time.perf_counter()
        await post_all(h, burst(200, 10))
        await h.settle(timeout=3600)
        elapsed = time.perf_counter() - t0
        await h.close()
        await fake.stop()
    texts = [json.dumps(b, ensure_ascii=False) for b in fake.accepted]
    listed = len({a for t in texts for a in re.findall(r"GPU-g\d{4}-\d{4}", t)})
    summarised = sum(int(n) for t in texts for n in re.findall(r"… (\d+) more alerts", t))
    messages = len(fake.accepted)
    return {
        "messages": messages,
        "listed": listed,
        "summarised": summarised,
        "rejections": sum(1 for c in fake.codes() if c != "0"),
        "seconds": elapsed,
        "minimum": minimum_seconds(limits, messages),
        "real_seconds": elapsed * scale,
        "real_minimum": minimum_seconds(real, messages),
    }


async def main(scale: float) -> None:
    print("== ingest: Alertmanager -> relay -> SQLite outbox (200 answered only after commit)")
    for groups, per in ((2000, 1), (200, 10)):
        secs, stored = await ingest(groups, per)
        print(
            f"{groups} notifications x {per} alerts: {secs:.2f} s, {groups / secs:.0f} notifications/s, "
            f"{groups * per / secs:.0f} alerts/s, {stored} messages stored"
        )
    print(f"== delivery of 2,000 alerts in 200 groups, rate-limit windows shrunk {scale:g}x")
    for kind in ("wecom", "feishu"):
        r = await delivery(kind, scale)
        per_message_ms = r["seconds"] / max(r["messages"], 1) * 1000
        print(
            f"{kind}: {r['messages']:.0f} messages ({r['listed']:.0f} alerts listed + {r['summarised']:.0f} "
            f"summarised, {r['rejections']:.0f} rate-limit/size rejections); measured {r['seconds']:.2f} s vs "
            f"theoretical minimum {r['minimum']:.2f} s under the shrunk limits (x{r['seconds'] / max(r['minimum'], 1e-9):.2f}, "
            f"{per_message_ms:.1f} ms per message end to end); at the real limits the minimum is "
            f"{r['real_minimum']:.0f} s"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=100.0, help="shrink rate-limit windows by this factor")
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main(parser.parse_args().scale))
