"""Durable outbox (SQLite): notifications and their rendered messages, stored before Alertmanager gets 200.

Rows survive a crash: WAL journal with ``synchronous=FULL`` makes a committed enqueue durable before the
HTTP answer. The sender takes the oldest pending message per bot and marks it delivered, retried or failed.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY,
    channel TEXT NOT NULL,
    group_key TEXT NOT NULL,
    digest TEXT NOT NULL,
    alerts INTEGER NOT NULL,
    received_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS notifications_digest ON notifications (channel, digest, received_at);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    notification_id INTEGER NOT NULL REFERENCES notifications (id),
    channel TEXT NOT NULL,
    bot TEXT NOT NULL,
    part INTEGER NOT NULL,
    parts INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0,
    enqueued_at REAL NOT NULL,
    next_attempt_at REAL NOT NULL,
    done_at REAL,
    code TEXT,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS messages_queue ON messages (bot, state, id);
CREATE INDEX IF NOT EXISTS messages_hash ON messages (channel, body_hash, enqueued_at);
"""


@dataclass(frozen=True)
class Pending:
    """One message to send: its body is the unsigned JSON document."""

    id: int
    channel: str
    body: dict[str, Any]
    attempts: int
    enqueued_at: float
    next_attempt_at: float
    part: int
    parts: int


@dataclass(frozen=True)
class Incoming:
    """One notification to store: its dedup ``digest``, and messages as ``(part, parts, kind, body)``."""

    channel: str
    bot: str
    group_key: str
    digest: str
    alerts: int
    messages: tuple[tuple[int, int, str, dict[str, Any]], ...]
    now: float
    window: float


@dataclass(frozen=True)
class Enqueued:
    """What ``enqueue`` stored: ``duplicate`` means the same notification was seen within the window and
    nothing was stored; ``skipped`` counts parts already queued or delivered with the same body."""

    duplicate: bool
    stored: int
    skipped: int


@dataclass(frozen=True)
class QueueStats:
    """Per channel: pending messages and the enqueue time of the oldest (Unix seconds), delivered, failed."""

    channel: str
    pending: int
    oldest_enqueued_at: float | None
    delivered: int
    failed: int


def body_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class Outbox:
    """The SQLite outbox at ``path``. Thread-safe (one connection behind a lock); blocking calls."""

    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        # Reads for metrics and the part budget use their own connection: in WAL mode they never wait for
        # the writer's fsync, so they do not serialise incoming webhooks behind each commit.
        self._read_lock = threading.Lock()
        self._reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)

    def close(self) -> None:
        with self._lock, self._read_lock:
            self._reader.close()
            self._db.close()

    def enqueue(
        self,
        channel: str,
        bot: str,
        group_key: str,
        digest: str,
        alerts: int,
        messages: Sequence[tuple[int, int, str, dict[str, Any]]],
        now: float,
        window: float,
    ) -> Enqueued:
        """Store one notification (see ``enqueue_many``)."""
        return self.enqueue_many(
            [Incoming(channel, bot, group_key, digest, alerts, tuple(messages), now, window)]
        )[0]

    def enqueue_many(self, items: Sequence[Incoming]) -> list[Enqueued]:
        """Store notifications and their messages in ONE transaction (one fsync for the batch: group commit),
        skipping a notification whose (channel, digest) arrived within its window, and parts whose body was
        queued or delivered within it. Raises sqlite3.Error if nothing was stored."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                results = [self._insert(db, item) for item in items]
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return results

    @staticmethod
    def _insert(db: sqlite3.Connection, it: Incoming) -> Enqueued:
        since = it.now - it.window
        seen = db.execute(
            "SELECT 1 FROM notifications WHERE channel = ? AND digest = ? AND received_at >= ? LIMIT 1",
            (it.channel, it.digest, since),
        ).fetchone()
        if seen:
            return Enqueued(duplicate=True, stored=0, skipped=0)
        nid = db.execute(
            "INSERT INTO notifications (channel, group_key, digest, alerts, received_at) VALUES (?,?,?,?,?)",
            (it.channel, it.group_key, it.digest, it.alerts, it.now),
        ).lastrowid
        stored = skipped = 0
        for part, parts, kind, body in it.messages:
            digest_body = body_hash(body)
            again = db.execute(
                "SELECT 1 FROM messages WHERE channel = ? AND body_hash = ? AND enqueued_at >= ?"
                " AND state != 'failed' LIMIT 1",
                (it.channel, digest_body, since),
            ).fetchone()
            if again:
                skipped += 1
                continue
            db.execute(
                "INSERT INTO messages (notification_id, channel, bot, part, parts, kind, body, body_hash,"
                " state, enqueued_at, next_attempt_at) VALUES (?,?,?,?,?,?,?,?,'pending',?,?)",
                (nid, it.channel, it.bot, part, parts, kind, json.dumps(body, ensure_ascii=False), digest_body,
                 it.now, it.now),
            )  # fmt: skip
            stored += 1
        return Enqueued(duplicate=False, stored=stored, skipped=skipped)

    def next_pending(self, bot: str) -> Pending | None:
        """The oldest pending message of ``bot`` (FIFO keeps firing before resolved), or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT id, channel, body, attempts, enqueued_at, next_attempt_at, part, parts FROM messages"
                " WHERE bot = ? AND state = 'pending' ORDER BY id LIMIT 1",
                (bot,),
            ).fetchone()
        if row is None:
            return None
        return Pending(row[0], row[1], json.loads(row[2]), row[3], row[4], row[5], row[6], row[7])

    def pending_count(self, bot: str) -> int:
        """Messages of ``bot`` still waiting: the backlog new notifications must share the window with."""
        with self._read_lock:
            row = self._reader.execute(
                "SELECT COUNT(*) FROM messages WHERE bot = ? AND state = 'pending'", (bot,)
            )
            return int(row.fetchone()[0])

    def mark_delivered(self, message_id: int, now: float) -> None:
        self._update(
            "UPDATE messages SET state='delivered', attempts=attempts+1, done_at=?, code='0' WHERE id=?",
            (now, message_id),
        )

    def mark_retry(self, message_id: int, next_attempt_at: float, code: str, reason: str) -> None:
        self._update(
            "UPDATE messages SET attempts=attempts+1, next_attempt_at=?, code=?, reason=? WHERE id=?",
            (next_attempt_at, code, reason, message_id),
        )

    def mark_failed(self, message_id: int, now: float, code: str, reason: str) -> None:
        self._update(
            "UPDATE messages SET state='failed', attempts=attempts+1, done_at=?, code=?, reason=? WHERE id=?",
            (now, code, reason, message_id),
        )

    def rebind(self, channel: str, bot: str) -> int:
        """Point the channel's pending messages at ``bot`` (its webhook URL changed across a restart)."""
        with self._lock:
            return self._db.execute(
                "UPDATE messages SET bot = ? WHERE channel = ? AND state = 'pending' AND bot != ?",
                (bot, channel, bot),
            ).rowcount

    def pending_bots(self) -> list[tuple[str, str]]:
        """(bot, channel) pairs with pending messages: what a restart must resume."""
        with self._lock:
            return [
                (r[0], r[1])
                for r in self._db.execute("SELECT DISTINCT bot, channel FROM messages WHERE state='pending'")
            ]

    def stats(self) -> list[QueueStats]:
        with self._read_lock:
            rows = self._reader.execute(
                "SELECT channel, SUM(state='pending'), MIN(CASE WHEN state='pending' THEN enqueued_at END),"
                " SUM(state='delivered'), SUM(state='failed') FROM messages GROUP BY channel ORDER BY channel"
            ).fetchall()
        return [QueueStats(r[0], int(r[1] or 0), r[2], int(r[3] or 0), int(r[4] or 0)) for r in rows]

    def messages(self, channel: str | None = None) -> list[dict[str, Any]]:
        """Every message row as a dict (for inspection and tests), oldest first."""
        query = "SELECT id, channel, part, parts, kind, state, attempts, code, reason, body FROM messages"
        args: tuple[Any, ...] = ()
        if channel is not None:
            query += " WHERE channel = ?"
            args = (channel,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY id", args).fetchall()
        keys = ("id", "channel", "part", "parts", "kind", "state", "attempts", "code", "reason", "body")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def prune(self, before: float) -> int:
        """Forget finished messages and notifications older than ``before``; returns rows removed."""
        with self._lock:
            n = self._db.execute(
                "DELETE FROM messages WHERE state != 'pending' AND done_at < ?", (before,)
            ).rowcount
            n += self._db.execute(
                "DELETE FROM notifications WHERE received_at < ? AND id NOT IN"
                " (SELECT notification_id FROM messages)",
                (before,),
            ).rowcount
        return n

    def _update(self, sql: str, args: tuple[Any, ...]) -> None:
        with self._lock:
            self._db.execute(sql, args)
