"""Group commit at ingest (alerts/relay/server.py ``Committer``): concurrent webhooks share outbox
transactions, each answered 200 only after its own transaction committed; a failed transaction answers 503 to
every webhook in it and loses nothing acknowledged before. Also the access log the relay writes and the
bounds ``alerts.payload.decode`` keeps (its depth count was rewritten for speed)."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from typing import Any

import aiohttp
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.relay.fakebots import FakeWeCom
from tests.relay.harness import Harness, metric_value, settings_for, start_relay
from tests.relay.test_delivery import big_group
from xpuwatch.alerts.payload import _depth
from xpuwatch.alerts.relay.webhook import parse_payload
from xpuwatch.exporter import catalog as C
from xpuwatch.exporter.listener import ConnectionGuard, listen


def group(name: str, pad: int = 0) -> dict[str, Any]:
    doc = big_group(1, group=name)
    doc["groupKey"] = f'{{}}:{{node="{name}"}}'
    if pad:
        doc["alerts"][0]["annotations"]["description"] = "x" * pad
    return doc


async def stalled_relay(tmp_path) -> tuple[Harness, FakeWeCom]:
    """A relay whose bot never answers: delivery takes nothing from the outbox while the test looks at it."""
    bot = FakeWeCom(stall_after=0)
    await bot.start()
    h = await start_relay(settings_for(tmp_path, {"ch": {"type": "wecom", "url": bot.url()}}))
    return h, bot


async def close(h: Harness, bot: FakeWeCom) -> None:
    bot.release()
    await h.close()
    await bot.stop()


async def until(condition, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def stored_groups(path: str) -> list[str]:
    """Group keys in the outbox file, read through a connection of its own (what a restart would find)."""
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute("SELECT group_key FROM notifications ORDER BY id")]
    finally:
        db.close()


async def test_concurrent_webhooks_share_transactions_and_each_is_stored_before_its_200(tmp_path):
    h, bot = await stalled_relay(tmp_path)
    lock = h.relay.outbox._lock
    try:
        lock.acquire()  # the writer blocks in its first transaction while the other webhooks arrive
        try:
            posts = asyncio.gather(*(h.post("ch", group(f"n{i:02d}")) for i in range(60)))
            await until(lambda: h.relay.committer.waiting == 60)
        finally:
            lock.release()
        answers = await posts
        keys = stored_groups(h.relay.settings.outbox)  # before anything else: the 200s were after commit
        text = (await h.get("/metrics"))[1]
    finally:
        await close(h, bot)
    assert answers == [(200, {"status": "queued", "stored": 1})] * 60
    assert sorted(keys) == sorted(f'{{}}:{{node="n{i:02d}"}}' for i in range(60))
    commits = h.relay.committer.commits
    assert 1 <= commits <= 3  # at most: the blocked first one, then everyone who arrived meanwhile
    assert metric_value(text, C.RELAY_INGEST_COMMITS.name) == commits
    assert metric_value(text, C.RELAY_RECEIVED.name, channel="ch") == 60


async def test_a_failed_transaction_answers_503_to_all_its_webhooks_and_keeps_what_was_acknowledged(tmp_path):
    h, bot = await stalled_relay(tmp_path)
    outbox = h.relay.outbox
    try:
        first = await asyncio.gather(*(h.post("ch", group(f"ok{i}")) for i in range(5)))
        before = h.relay.committer.commits
        outbox._lock.acquire()
        try:
            posts = asyncio.gather(*(h.post("ch", group(f"full{i:02d}", pad=20_000)) for i in range(20)))
            await until(lambda: h.relay.committer.waiting == 20)
            pages = outbox._db.execute("PRAGMA page_count").fetchone()[0]
            outbox._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full: SQLITE_FULL
        finally:
            outbox._lock.release()
        failed = await posts
        failed_commits = h.relay.committer.commits - before
        outbox._db.execute("PRAGMA max_page_count = 1073741823")  # space again
        retried = await h.post("ch", group("full00", pad=20_000))  # Alertmanager retries: not a duplicate
        text = (await h.get("/metrics"))[1]
    finally:
        await close(h, bot)
    assert first == [(200, {"status": "queued", "stored": 1})] * 5
    error = "could not store the notification in the outbox: database or disk is full"
    assert failed == [(503, {"status": "error", "error": error})] * 20
    assert 1 <= failed_commits <= 2  # 20 webhooks, at most two transactions, every one answered 503
    assert retried == (200, {"status": "queued", "stored": 1})
    assert stored_groups(h.relay.settings.outbox) == [f'{{}}:{{node="ok{i}"}}' for i in range(5)] + [
        '{}:{node="full00"}'
    ]
    assert metric_value(text, C.RELAY_REJECTED.name, reason="store_failed") == 20


async def test_the_writer_goes_on_after_a_failed_transaction_and_stops_with_the_app(tmp_path):
    h, bot = await stalled_relay(tmp_path)
    try:
        h.relay.outbox._db.execute("DROP TABLE notifications")  # nothing can be stored
        broken = await h.post("ch", group("a"))
        h.relay.outbox._db.executescript(
            "CREATE TABLE notifications (id INTEGER PRIMARY KEY, channel TEXT NOT NULL, group_key TEXT NOT NULL,"
            " digest TEXT NOT NULL, alerts INTEGER NOT NULL, received_at REAL NOT NULL, bot TEXT NOT NULL"
            " DEFAULT '', episode TEXT NOT NULL DEFAULT '', payload TEXT, state TEXT NOT NULL DEFAULT"
            " 'rendered', reason TEXT)"
        )
        mended = await h.post("ch", group("a"))
        again = await h.post("ch", group("a"))
        thread = h.relay.committer._thread
    finally:
        await close(h, bot)
    assert broken[0] == 503
    assert mended == (200, {"status": "queued", "stored": 1})
    assert again == (200, {"status": "duplicate", "stored": 0})
    assert thread is not None and not thread.is_alive()


async def test_access_lines_for_refused_requests_only_unless_debug(caplog):
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["status"]))

    app = web.Application()
    app.router.add_post("/{status}", answer)
    served = await listen(app, "127.0.0.1", 0, ConnectionGuard(), access_log_from=400)
    base = "http://{}:{}".format(*served.address)
    logged: dict[str, list[str]] = {}
    try:
        async with aiohttp.ClientSession() as s:
            for level in ("INFO", "DEBUG"):
                with caplog.at_level(getattr(logging, level), logger="aiohttp.access"):
                    caplog.clear()
                    for status in (200, 401, 503):
                        async with s.post(f"{base}/{status}") as r:
                            await r.read()
                    await asyncio.sleep(0.05)  # the access line is written after the answer
                    logged[level] = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    finally:
        await served.runner.cleanup()
    assert [line.split('"')[1] for line in logged["INFO"]] == ["POST /401 HTTP/1.1", "POST /503 HTTP/1.1"]
    assert len(logged["DEBUG"]) == 3


def test_digest_and_episode_are_the_formulas_stored_outboxes_hold():
    """The dedup identity must not change with the faster encoding: a retry across an upgrade is still a
    duplicate. Reference: the formulas as first written (json.dumps with compact separators)."""
    import hashlib

    doc = big_group(10, group="g")
    doc["groupKey"] = '{}:{node="g", quote="\\"é"}'
    doc["alerts"][1]["startsAt"] = (
        "2024-05-01T12:00:00+02:00"  # the same instant as the others, printed otherwise
    )
    doc["alerts"][2]["startsAt"] = "2024-05-01T10:00:00.123456789Z"
    del doc["alerts"][3]["startsAt"]
    n = parse_payload(doc)
    triples = sorted(
        f"{a.fingerprint}:{a.status}:{a.starts_at.isoformat() if a.starts_at else ''}" for a in n.alerts
    )
    episode = hashlib.sha256(json.dumps(triples, separators=(",", ":")).encode()).hexdigest()
    raw = json.dumps([n.group_key, episode], separators=(",", ":"))
    assert n.episode() == episode
    assert n.digest() == hashlib.sha256(raw.encode()).hexdigest()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=40,
)


def reference_depth(doc: Any) -> int:
    if isinstance(doc, dict):
        return 1 + max((reference_depth(v) for v in doc.values()), default=0)
    if isinstance(doc, list):
        return 1 + max((reference_depth(v) for v in doc), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(json_values, st.integers(min_value=0, max_value=6))
def test_depth_counts_nesting_like_the_recursive_definition(doc, limit):
    assert _depth(doc, limit) == min(reference_depth(doc), limit + 1)
