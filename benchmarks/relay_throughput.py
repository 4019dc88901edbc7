"""Relay benchmark: ingest against its floor, and burst delivery against each bot's rate-limit floor.

Ingest: notifications answered 200 per second (each committed to the outbox before the answer), for 1- and
10-alert notifications, next to the FLOOR measured in the same run: a bare aiohttp handler (``--serve-floor``)
that commits the body to SQLite with the same durability (WAL, ``synchronous=FULL``, the answer only after
the commit) and GROUP-COMMITS as the relay does (one writer thread stores every body that arrived during the
previous transaction in the next one). Client and servers are separate processes: this process drives
``CONCURRENCY`` connections (aiohttp, that many requests in flight) against the floor, then against
``xpuwatch relay`` as deployed (its own process, default flags); the first ``CONCURRENCY`` requests of each
run are a warm-up. Each round runs every server once, the order rotated every round; medians are printed,
with each server's CPU per notification (all its threads, /proc/PID/task/*/schedstat), steadier than the wall
time on a shared machine. ``--baseline DIR`` adds the relay from another source tree (``git archive COMMIT |
tar -x -C DIR``) to the same rounds: before and after in one run.

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
    PYTHONPATH=$PWD python benchmarks/relay_throughput.py --skip-burst --rounds 7 [--baseline /tmp/base]
    PYTHONPATH=$PWD python benchmarks/relay_throughput.py --skip-ingest --runs 3 [--bots feishu]
    PYTHONPATH=$PWD python benchmarks/relay_throughput.py --skip-ingest --real [--bots feishu,wecom,dingtalk]
    PYTHONPATH=$PWD python benchmarks/relay_throughput.py --skip-ingest --real --bots feishu --groups 95
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import queue
import re
import socket
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.relay.fakebots import FakeBot, FakeDingTalk, FakeFeishu, FakeWeCom
from tests.relay.harness import TOKEN, settings_for, start_relay
from tests.relay.test_delivery import big_group
from xpuwatch.alerts.relay import dingtalk, feishu, wecom
from xpuwatch.alerts.relay.config import RateLimit
from xpuwatch.alerts.relay.limiter import SlidingWindowLimiter

CONCURRENCY = 20  # Alertmanager flushes groups concurrently
ROOT = Path(__file__).resolve().parents[1]


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


async def post_all(url: str, docs: list[bytes], concurrency: int = CONCURRENCY) -> float:
    """Seconds to get every doc answered 200, ``concurrency`` in flight."""
    sem = asyncio.Semaphore(concurrency)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as s:

        async def one(doc: bytes) -> None:
            async with sem, s.post(url, data=doc, headers=headers) as r:
                await r.read()
                assert r.status == 200, (r.status, await r.text())

        t0 = time.perf_counter()
        await asyncio.gather(*(one(d) for d in docs))
        return time.perf_counter() - t0


def serve_floor(db_path: str) -> None:
    """The floor, run in its own process (``--serve-floor PATH``): a bare aiohttp handler that reads the body
    and commits it to SQLite with the relay's durability (WAL, ``synchronous=FULL``, the answer only after
    the commit), with GROUP COMMIT: one writer thread takes every body that arrived while the previous
    transaction ran and stores them in one transaction (one fsync), then resolves each request's future."""
    db = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS n (id INTEGER PRIMARY KEY, body BLOB)")
    waiting: queue.SimpleQueue[tuple[bytes, asyncio.Future[None]]] = queue.SimpleQueue()

    def done(futures: list[asyncio.Future[None]]) -> None:
        for f in futures:
            f.set_result(None)

    def writer(loop: asyncio.AbstractEventLoop) -> None:
        while True:
            batch = [waiting.get()]
            while len(batch) < 256:
                try:
                    batch.append(waiting.get_nowait())
                except queue.Empty:
                    break
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO n (body) VALUES (?)", [(b,) for b, _ in batch])
            db.execute("COMMIT")
            loop.call_soon_threadsafe(done, [f for _, f in batch])

    async def handler(request: web.Request) -> web.Response:
        body = await request.read()
        future = asyncio.get_running_loop().create_future()
        waiting.put((body, future))
        await future
        return web.json_response({"status": "queued"})

    async def main() -> None:
        threading.Thread(target=writer, args=(asyncio.get_running_loop(),), daemon=True).start()
        app = web.Application()
        app.router.add_post("/alertmanager/{channel}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"floor listening on 127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


async def started(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[asyncio.subprocess.Process, str]:
    """Start a server process and read its "... listening on HOST:PORT" line: (process, base URL)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env, cwd=cwd
    )
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        while True:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise RuntimeError(f"{argv[0]} exited before listening")
            if m := re.search(r"listening on (\S+):(\d+)", line):
                return proc, f"http://{m[1]}:{m[2]}"


async def stopped(proc: asyncio.subprocess.Process) -> None:
    proc.terminate()
    async with asyncio.timeout(30):
        await proc.wait()


@dataclass(frozen=True)
class Round:
    """One server's run over the docs: wall seconds until the last 200, and the CPU seconds (user + system,
    all threads) the server process spent meanwhile (/proc/PID/stat), which a busy shared machine disturbs
    less than the wall time."""

    seconds: float
    cpu: float


def cpu_seconds(pid: int) -> float:
    """CPU seconds all threads of process ``pid`` have run so far (Linux /proc/PID/task/*/schedstat, in
    nanoseconds: the clock-tick counts of /proc/PID/stat are too coarse for a few hundred requests)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


async def measured(proc: asyncio.subprocess.Process, url: str, docs: list[bytes]) -> Round:
    await post_all(url, docs[:CONCURRENCY])  # warm-up (connections, first render): not counted
    cpu = cpu_seconds(proc.pid)
    seconds = await post_all(url, docs[CONCURRENCY:])
    return Round(seconds, cpu_seconds(proc.pid) - cpu)


async def floor_ingest(tmp: Path, docs: list[bytes]) -> Round:
    """The floor process answering every doc (client here, server in its own process)."""
    proc, base = await started([sys.executable, __file__, "--serve-floor", str(tmp / "floor.sqlite")])
    try:
        return await measured(proc, f"{base}/alertmanager/ch", docs)
    finally:
        await stopped(proc)


async def relay_ingest(tmp: Path, docs: list[bytes], bot: str, tree: Path | None = None) -> Round:
    """``xpuwatch relay`` in its own process (default flags: info logging) answering every doc: auth,
    validation, dedup, commit. Its bot is a socket that never answers (delivery cannot compete): the sender
    renders one notification, sends it and waits. ``tree``: run the relay's code from that source tree (an
    export of another commit, for a before/after in the same run) instead of this one."""
    cfg = {
        "outbox": str(tmp / "outbox.sqlite"),
        "auth": {"bearer_token_env": "RELAY_TOKEN"},
        "request_timeout_seconds": 300,
        "channels": {"ch": {"type": "wecom", "webhook_url_env": "URL_CH", "max_parts": 10}},
    }
    (tmp / "relay.yaml").write_text(json.dumps(cfg))  # JSON is YAML
    env = {**os.environ, "RELAY_TOKEN": TOKEN, "URL_CH": bot}
    if tree is not None:  # `python -m` puts the working directory first on sys.path, ahead of the install
        env["PYTHONPATH"] = str(tree)
    argv = [sys.executable, "-m", "xpuwatch", "relay", "--config", str(tmp / "relay.yaml")]
    proc, base = await started([*argv, "--web.listen-address", "127.0.0.1:0"], env, tree or ROOT)
    try:
        return await measured(proc, f"{base}/alertmanager/ch", docs)
    finally:
        await stopped(proc)


async def ingest(
    groups: int, per_group: int, rounds: int, baseline: Path | None = None
) -> dict[str, list[Round]]:
    """``groups`` notifications per round (the first ``CONCURRENCY`` a warm-up) to each server: "floor",
    "relay" and, with ``baseline``, "baseline" (the relay from that tree). Each round runs them one after
    the other, the order rotated every round, so a drift in the machine's load hits all alike."""
    sink = socket.create_server(("127.0.0.1", 0), backlog=128)  # accepts (in the kernel), never answers
    bot = f"http://127.0.0.1:{sink.getsockname()[1]}/cgi-bin/webhook/send?key=bench"
    names = ["floor", "relay"] + (["baseline"] if baseline is not None else [])
    runs: dict[str, list[Round]] = {name: [] for name in names}
    try:
        for r in range(rounds):
            docs = burst(groups, per_group, tag=f"r{r}-")
            for name in names[r % len(names) :] + names[: r % len(names)]:
                with tempfile.TemporaryDirectory() as tmp:
                    if name == "floor":
                        runs[name].append(await floor_ingest(Path(tmp), docs))
                    else:
                        tree = baseline if name == "baseline" else None
                        runs[name].append(await relay_ingest(Path(tmp), docs, bot, tree))
    finally:
        sink.close()
    return runs


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
        for groups, per in ((1000 + CONCURRENCY, 1), (300 + CONCURRENCY, 10)):
            runs = await ingest(groups, per, args.rounds, args.baseline)
            n = groups - CONCURRENCY
            floor = runs.pop("floor")
            f = statistics.median(x.seconds for x in floor)
            fc = statistics.median(x.cpu for x in floor)
            print(
                f"{per:>2}-alert notifications x{n}, {CONCURRENCY} in flight, medians of {args.rounds} rounds: "
                f"group-commit floor {n / f:.0f}/s ({f * 1000 / n:.3f} ms each, server CPU {fc * 1e6 / n:.0f} us "
                f"each); load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            for name, rounds in runs.items():
                r = statistics.median(x.seconds for x in rounds)
                rc = statistics.median(x.cpu for x in rounds)
                ratios = ", ".join(f"{b.seconds / a.seconds:.2f}" for a, b in zip(floor, rounds, strict=True))
                print(
                    f"   {name:>8}: {n / r:.0f}/s ({r * 1000 / n:.3f} ms each): x{r / f:.2f} the floor (per round "
                    f"{ratios}); server CPU {rc * 1e6 / n:.0f} us each (x{rc / max(fc, 1e-9):.2f})",
                    flush=True,
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
    parser.add_argument(
        "--baseline",
        type=Path,
        help="also measure the relay from this source tree (e.g. `git archive HEAD~3 | tar -x -C DIR`)",
    )
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--skip-burst", action="store_true")
    parser.add_argument("--serve-floor", metavar="PATH", help=argparse.SUPPRESS)  # the floor's own process
    logging.basicConfig(level=logging.CRITICAL)
    parsed = parser.parse_args()
    if parsed.serve_floor:
        serve_floor(parsed.serve_floor)
    else:
        asyncio.run(main(parsed))
