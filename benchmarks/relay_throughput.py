"""Relay benchmark: ingest against its floor, and burst delivery against each bot's rate-limit floor.

Ingest: notifications answered 200 per second (each committed to the outbox before the answer), for 1- and
10-alert notifications, next to the FLOOR measured in the same run: a minimal aiohttp handler that commits the
same body to SQLite with the same durability (WAL, ``synchronous=FULL``, one transaction per request) and
answers. Rounds alternate floor and relay; medians are printed.

Burst: 2,000 alerts in 200 groups to each fake bot (tests/relay/fakebots.py), windows shrunk to finish in
seconds: WeCom and DingTalk (20/min) by --scale (100x: 20 per 0.6 s), Feishu (5/s and 100/min) by --feishu-scale
(10x: 5 per 0.1 s). Shrinking Feishu's 5/s window 100x would leave 2 ms per message, less than rendering a
10-alert card takes here; 10x leaves 20 ms (the real limit leaves 200 ms). With ``--real`` the windows are the
documented ones and the bursts are sized to span about two minutes of limits: Feishu 250 groups (250 messages:
100 in the first minute, 100 in the second, 50 in the third, floor 129 s), WeCom and DingTalk 45 groups (20 +
20 + 5 at 20/min, floor 120 s when each group is one message).

The delivery time is the bot's first to last accepted message, against the minimum the limits allow for that
many messages (``minimum_seconds``); rate-limit rejections are counted (must be 0). The "slot slack" is, for
every accepted message k, ``t[k+n] - t[k] - W`` on the bot's clock for the shortest window (n per W seconds):
how much later than the window allows the n-th next message arrived. The sender counts a send when its answer
arrives (alerts/relay/limiter.py says why), so each slot pays about one round trip plus the sender's own step
per window: the figure that shrinking a window exaggerates.

    PYTHONPATH=$PWD python benchmarks/relay_throughput.py [--scale 100] [--feishu-scale 10] [--rounds 3]
    PYTHONPATH=$PWD python benchmarks/relay_throughput.py --skip-ingest --runs 3 [--bots feishu]
    PYTHONPATH=$PWD python benchmarks/relay_throughput.py --skip-ingest --real [--bots feishu,wecom,dingtalk]
    PYTHONPATH=$PWD python benchmarks/relay_throughput.py --skip-ingest --real --bots feishu --groups 95
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.relay import dingtalk, feishu, wecom
from alerts.relay.config import RateLimit
from alerts.relay.limiter import SlidingWindowLimiter
from tests.relay.fakebots import FakeBot, FakeDingTalk, FakeFeishu, FakeWeCom
from tests.relay.harness import TOKEN, settings_for, start_relay
from tests.relay.test_delivery import big_group

CONCURRENCY = 20  # Alertmanager flushes groups concurrently


def burst(groups: int, per_group: int, tag: str = "g") -> list[bytes]:
    docs = []
    for g in range(groups):
        doc = big_group(per_group, group=f"{tag}{g:04d}")
        doc["groupKey"] = f'{{}}:{{node="{tag}{g:04d}"}}'
        docs.append(json.dumps(doc).encode())
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


async def post_all(url: str, docs: list[bytes]) -> float:
    """Seconds to get every doc answered 200, ``CONCURRENCY`` in flight."""
    sem = asyncio.Semaphore(CONCURRENCY)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as s:

        async def one(doc: bytes) -> None:
            async with sem, s.post(url, data=doc, headers=headers) as r:
                await r.read()
                assert r.status == 200, r.status

        t0 = time.perf_counter()
        await asyncio.gather(*(one(d) for d in docs))
        return time.perf_counter() - t0


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def floor_ingest(tmp: Path, docs: list[bytes]) -> float:
    """The floor: read the body, commit it to SQLite (WAL, synchronous=FULL) off the loop, answer 200."""
    db = sqlite3.connect(str(tmp / "floor.sqlite"), isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS n (id INTEGER PRIMARY KEY, body BLOB)")
    lock = threading.Lock()

    def commit(body: bytes) -> None:
        with lock:
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO n (body) VALUES (?)", (body,))
            db.execute("COMMIT")

    async def handler(request: web.Request) -> web.Response:
        body = await request.read()
        await asyncio.to_thread(commit, body)
        return web.json_response({"status": "queued"})

    app = web.Application()
    app.router.add_post("/alertmanager/{channel}", handler)
    runner, base = await serve(app)
    try:
        return await post_all(f"{base}/alertmanager/ch", docs)
    finally:
        await runner.cleanup()
        db.close()


async def relay_ingest(tmp: Path, docs: list[bytes]) -> float:
    """The relay with a bot that never answers (delivery cannot compete): auth, validation, dedup, commit."""
    fake = FakeWeCom(stall_after=0)
    await fake.start()
    h = await start_relay(
        settings_for(tmp, {"ch": {"type": "wecom", "url": fake.url(), "max_parts": 10}}),
    )
    try:
        return await post_all(f"{h.url}/alertmanager/ch", docs)
    finally:
        fake.release()
        await h.close()
        await fake.stop()


async def ingest(groups: int, per_group: int, rounds: int) -> tuple[float, float]:
    """Median seconds for ``groups`` notifications: (floor, relay)."""
    floor, relay = [], []
    for r in range(rounds):
        docs = burst(groups, per_group, tag=f"r{r}-")
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            floor.append(await floor_ingest(Path(a), docs))
            relay.append(await relay_ingest(Path(b), docs))
    return statistics.median(floor), statistics.median(relay)


def scaled(limits: tuple[RateLimit, ...], scale: float) -> tuple[RateLimit, ...]:
    return tuple(RateLimit(lim.count, lim.per_seconds / scale) for lim in limits)


REAL_GROUPS = {"feishu": 250, "wecom": 45, "dingtalk": 45}


def slot_slack(times: list[float], limits: tuple[RateLimit, ...]) -> list[float]:
    """``t[k+n] - t[k] - W`` for the shortest window (n per W), for every k whose n-th next message waited for
    that window and not a longer one (its slack is under W)."""
    short = min(limits, key=lambda lim: lim.per_seconds)
    n, span = short.count, short.per_seconds
    gaps = [times[k + n] - times[k] - span for k in range(len(times) - n)]
    return [g for g in gaps if g < span]


async def delivery(kind: str, scale: float, groups: int = 200) -> dict[str, float]:
    real = {"wecom": wecom.LIMITS, "feishu": feishu.LIMITS, "dingtalk": dingtalk.LIMITS}[kind]
    limits = scaled(real, scale)
    fake: FakeBot = {"wecom": FakeWeCom, "feishu": FakeFeishu, "dingtalk": FakeDingTalk}[kind](limits=limits)
    await fake.start()
    with tempfile.TemporaryDirectory() as tmp:
        channel = {
            "type": kind,
            "url": fake.url(),  # type: ignore[attr-defined]
            "rate_limits": [{"count": x.count, "per_seconds": x.per_seconds} for x in limits],
        }
        h = await start_relay(settings_for(Path(tmp), {"ch": channel}))
        try:
            await post_all(f"{h.url}/alertmanager/ch", burst(groups, 10))
            await h.settle(timeout=3600)
        finally:
            await h.close()
            await fake.stop()
    texts = [json.dumps(b, ensure_ascii=False) for b in fake.accepted]
    times = list(fake.window.times)
    messages = len(fake.accepted)
    slack = sorted(slot_slack(times, limits)) or [0.0]
    return {
        "slack_median": statistics.median(slack),
        "slack_p90": slack[int(0.9 * (len(slack) - 1))],
        "slack_max": slack[-1],
        "messages": messages,
        "listed": len({a for t in texts for a in re.findall(r"GPU-g\d{4}-\d{4}", t)}),
        "summarised": sum(int(n) for t in texts for n in re.findall(r"… (\d+) more alerts", t)),
        "rejections": sum(1 for c in fake.codes() if c != "0"),
        "seconds": times[-1] - times[0] if times else 0.0,
        "minimum": minimum_seconds(limits, messages),
    }


async def main(args: argparse.Namespace) -> None:
    if not args.skip_ingest:
        print(
            "== ingest: Alertmanager -> relay -> SQLite outbox (200 only after commit), vs the floor, same run"
        )
        for groups, per in ((1000, 1), (300, 10)):
            floor, relay = await ingest(groups, per, args.rounds)
            print(
                f"{per:>2}-alert notifications x{groups}: relay {groups / relay:.0f}/s ({relay * 1000 / groups:.2f} "
                f"ms each), floor {groups / floor:.0f}/s ({floor * 1000 / groups:.2f} ms each): relay/floor "
                f"x{relay / floor:.2f} (median of {args.rounds} alternating rounds, {CONCURRENCY} in flight)"
            )
    if args.skip_burst:
        return
    kinds = [k.strip() for k in args.bots.split(",") if k.strip()]
    if args.real:
        print("== burst: groups of 10 alerts per bot, the documented rate-limit windows (minutes per run)")
    else:
        print("== burst: groups of 10 alerts per bot, rate-limit windows shrunk")
    for run in range(args.runs):
        for kind in kinds:
            factor = 1.0 if args.real else args.feishu_scale if kind == "feishu" else args.scale
            groups = args.groups or (REAL_GROUPS[kind] if args.real else 200)
            r = await delivery(kind, factor, groups)
            print(
                f"run {run + 1} {kind} (windows /{factor:g}): {r['messages']:.0f} messages ({r['listed']:.0f} alerts "
                f"listed + {r['summarised']:.0f} summarised, {r['rejections']:.0f} rejections); first-to-last "
                f"delivery {r['seconds']:.3f} s vs limit floor {r['minimum']:.3f} s "
                f"(x{r['seconds'] / max(r['minimum'], 1e-9):.3f}); slot slack median {r['slack_median'] * 1000:.1f} ms, "
                f"p90 {r['slack_p90'] * 1000:.1f} ms, max {r['slack_max'] * 1000:.1f} ms; load average "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=100.0, help="shrink rate-limit windows by this factor")
    parser.add_argument("--feishu-scale", type=float, default=10.0, help="the same for Feishu's windows")
    parser.add_argument("--rounds", type=int, default=3, help="alternating floor/relay ingest rounds")
    parser.add_argument("--runs", type=int, default=1, help="burst runs per bot")
    parser.add_argument("--bots", default="wecom,feishu,dingtalk", help="comma-separated bots to burst")
    parser.add_argument("--real", action="store_true", help="documented windows, bursts of about 2 minutes")
    parser.add_argument(
        "--groups", type=int, help="groups of 10 alerts per burst (default 200; --real: per bot)"
    )
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--skip-burst", action="store_true")
    logging.basicConfig(level=logging.CRITICAL)
    asyncio.run(main(parser.parse_args()))
