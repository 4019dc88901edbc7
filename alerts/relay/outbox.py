"""Durable outbox (SQLite): notifications as received, their rendered messages, and the send times of each bot.

Rows survive a crash: WAL journal with ``synchronous=FULL`` makes a committed notification durable before the
HTTP answer. Ingest stores the validated payload only; the sender renders it into messages (once per
notification, in one transaction) just before delivery, takes the oldest pending message per bot and marks it
delivered, retried or failed. Send times are kept so a restarted relay honours the bots' rate-limit windows.
A file with corrupt pages is moved aside (quarantined) at open and a fresh outbox started, with an error log.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

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
CREATE TABLE IF NOT EXISTS sends (
    id INTEGER PRIMARY KEY,
    bot TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS sends_bot ON sends (bot, at);
"""
# Columns added to ``notifications`` since the first schema (older outboxes are migrated at open). A row
# stored before the change has no payload and counts as rendered: its messages were stored with it.
_ADDED_COLUMNS = (
    ("bot", "TEXT NOT NULL DEFAULT ''"),
    ("episode", "TEXT NOT NULL DEFAULT ''"),
    ("payload", "TEXT"),
    ("state", "TEXT NOT NULL DEFAULT 'rendered'"),
    ("reason", "TEXT"),
)
# Columns added to ``messages``: ``unconfirmed`` counts sends of the message that got no answer within the
# request timeout (the bot may have shown it); the sender bounds them (sender.MAX_UNCONFIRMED_SENDS).
_ADDED_MESSAGE_COLUMNS = (("unconfirmed", "INTEGER NOT NULL DEFAULT 0"),)
_POST_MIGRATION = "CREATE INDEX IF NOT EXISTS notifications_queue ON notifications (bot, state, id);"
_CORRUPT = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


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
    unconfirmed: int = 0
    """Earlier sends of this message that got no answer within their timeout (the bot may have shown it)."""


@dataclass(frozen=True)
class Incoming:
    """One validated notification to store: its dedup ``digest`` (groupKey + episode), its ``episode``
    (alerts and their ``startsAt``, see ``webhook.Notification.episode``) and the raw ``payload`` text."""

    channel: str
    bot: str
    group_key: str
    digest: str
    episode: str
    alerts: int
    payload: bytes
    now: float
    window: float


@dataclass(frozen=True)
class Enqueued:
    """What ``enqueue`` stored: ``duplicate`` means the same notification (same group and episode) was seen
    within the window and nothing was stored."""

    duplicate: bool
    id: int | None = None


@dataclass(frozen=True)
class Unrendered:
    """A stored notification whose messages are not rendered yet (rendering happens at delivery time)."""

    id: int
    channel: str
    episode: str
    payload: bytes
    received_at: float


@dataclass(frozen=True)
class Rendered:
    """What ``store_rendered`` did: messages stored, and parts skipped because the same body for the same
    episode was already queued or delivered within the window (e.g. an HA peer routing it under another key)."""

    stored: int
    skipped: int


@dataclass(frozen=True)
class QueueStats:
    """Per channel: pending messages plus notifications not yet rendered, the enqueue time of the oldest of
    them (Unix seconds), delivered, failed."""

    channel: str
    pending: int
    oldest_enqueued_at: float | None
    delivered: int
    failed: int


class OutboxError(sqlite3.DatabaseError):
    """The outbox cannot be used; the message says what to do."""


def body_hash(body: dict[str, Any], episode: str = "") -> str:
    """Identity of one part: its JSON body plus the episode it reports, so a re-fire whose text happens to be
    identical (a template without times) is still a new message."""
    raw = json.dumps(body, sort_keys=True, ensure_ascii=False) + "\x00" + episode
    return hashlib.sha256(raw.encode()).hexdigest()


def _corrupt(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in _CORRUPT


class Outbox:
    """The SQLite outbox at ``path``. Thread-safe (one connection behind a lock); blocking calls.

    ``quarantined`` is the path the corrupt file was moved to at open, or None. Raises sqlite3.Error when the
    file cannot be opened at all (permissions, missing folder)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.quarantined: str | None = None
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            if not _corrupt(exc) and "malformed" not in str(exc):
                raise
            self._close_quietly()
            self.quarantined = self._quarantine(str(exc))
            self._open()

    def _open(self) -> None:
        path = self.path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        check = [r[0] for r in self._db.execute("PRAGMA quick_check(5)")]
        if check != ["ok"]:
            raise sqlite3.DatabaseError(f"database disk image is malformed: {'; '.join(check)}")
        self._db.executescript(SCHEMA)
        have = {r[1] for r in self._db.execute("PRAGMA table_info(notifications)")}
        for name, decl in _ADDED_COLUMNS:
            if name not in have:
                self._db.execute(f"ALTER TABLE notifications ADD COLUMN {name} {decl}")
        have = {r[1] for r in self._db.execute("PRAGMA table_info(messages)")}
        for name, decl in _ADDED_MESSAGE_COLUMNS:
            if name not in have:
                self._db.execute(f"ALTER TABLE messages ADD COLUMN {name} {decl}")
        self._db.executescript(_POST_MIGRATION)
        # Reads for metrics and the part budget use their own connection: in WAL mode they never wait for
        # the writer's fsync, so they do not serialise incoming webhooks behind each commit.
        self._read_lock = threading.Lock()
        self._reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        # The sender's writes (rendered messages, delivery marks, send times) use their own connection with
        # synchronous=NORMAL: in WAL mode a commit then survives a killed process but not a power loss, and
        # costs no fsync. Losing one to a power loss only repeats work (the notification itself was committed
        # with FULL at ingest and is rendered again; an unmarked message is sent again: at-least-once), and
        # send times matter only for a minute, shorter than any reboot. Ingest keeps the fsync it promises.
        self._work_lock = threading.Lock()
        self._work = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._work.execute("PRAGMA synchronous=NORMAL")

    def _close_quietly(self) -> None:
        for name in ("_reader", "_work", "_db"):
            conn = getattr(self, name, None)
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    def _quarantine(self, why: str) -> str:
        """Move the corrupt file (and its WAL and shared-memory files) aside for inspection."""
        target = f"{self.path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.replace(self.path + suffix, target + suffix)
        log.error(
            "outbox %s is corrupt (%s): moved to %s and started a new, empty outbox; messages still pending "
            "in the old file were not delivered (inspect it with sqlite3 '.recover')",
            self.path,
            why,
            target,
        )
        return target

    def close(self) -> None:
        with self._lock, self._read_lock, self._work_lock:
            self._reader.close()
            self._work.close()
            self._db.close()

    def enqueue(self, item: Incoming) -> Enqueued:
        """Store one notification (see ``enqueue_many``)."""
        return self.enqueue_many([item])[0]

    def enqueue_many(self, items: Sequence[Incoming]) -> list[Enqueued]:
        """Store notifications in ONE transaction (one fsync for the batch: group commit), skipping one whose
        (channel, digest) arrived within its window. Raises sqlite3.Error if nothing was stored (the original
        error, e.g. "database or disk is full", never a failed rollback)."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                results = [self._insert(db, item) for item in items]
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # SQLite may have rolled back already (disk full): keep the real error
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise
        return results

    @staticmethod
    def _insert(db: sqlite3.Connection, it: Incoming) -> Enqueued:
        # One statement: the dedup look-up (index notifications_digest) and the insert, one round each way.
        cur = db.execute(
            "INSERT INTO notifications (channel, group_key, digest, alerts, received_at, bot, episode, payload,"
            " state) SELECT ?,?,?,?,?,?,?,?,'pending' WHERE NOT EXISTS (SELECT 1 FROM notifications"
            " WHERE channel = ? AND digest = ? AND received_at >= ?)",
            (it.channel, it.group_key, it.digest, it.alerts, it.now, it.bot, it.episode, it.payload,
             it.channel, it.digest, it.now - it.window),
        )  # fmt: skip
        if cur.rowcount == 0:
            return Enqueued(duplicate=True)
        return Enqueued(duplicate=False, id=cur.lastrowid)

    def unrendered(self, bot: str, limit: int = 64) -> list[Unrendered]:
        """The oldest notifications of ``bot`` still to be rendered, oldest first."""
        with self._work_lock:
            rows = self._work.execute(
                "SELECT id, channel, episode, payload, received_at FROM notifications"
                " WHERE bot = ? AND state = 'pending' ORDER BY id LIMIT ?",
                (bot, limit),
            ).fetchall()
        return [Unrendered(*r) for r in rows]

    def store_rendered(
        self,
        note: Unrendered,
        bot: str,
        messages: Sequence[tuple[int, int, str, dict[str, Any]]],
        window: float,
    ) -> Rendered:
        """Store the rendered ``messages`` (``(part, parts, kind, body)``) of ``note`` and mark it rendered,
        in one transaction. A part whose body was queued or delivered for the same episode within ``window``
        is skipped; follow-ups (mentions) never are."""
        since = note.received_at - window
        stored = skipped = 0
        with self._work_lock:
            db = self._work
            db.execute("BEGIN IMMEDIATE")
            try:
                for part, parts, kind, body in messages:
                    digest_body = body_hash(body, note.episode)
                    if kind == "part":
                        again = db.execute(
                            "SELECT 1 FROM messages WHERE channel = ? AND body_hash = ? AND enqueued_at >= ?"
                            " AND state != 'failed' LIMIT 1",
                            (note.channel, digest_body, since),
                        ).fetchone()
                        if again:
                            skipped += 1
                            continue
                    db.execute(
                        "INSERT INTO messages (notification_id, channel, bot, part, parts, kind, body, body_hash,"
                        " state, enqueued_at, next_attempt_at) VALUES (?,?,?,?,?,?,?,?,'pending',?,?)",
                        (note.id, note.channel, bot, part, parts, kind, json.dumps(body, ensure_ascii=False),
                         digest_body, note.received_at, note.received_at),
                    )  # fmt: skip
                    stored += 1
                db.execute("UPDATE notifications SET state = 'rendered' WHERE id = ?", (note.id,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise
        return Rendered(stored, skipped)

    def fail_notification(self, nid: int, reason: str) -> None:
        """Record that a notification could not be rendered (kept, with its payload, for inspection)."""
        self._update("UPDATE notifications SET state = 'failed', reason = ? WHERE id = ?", (reason, nid))

    def next_pending(self, bot: str) -> Pending | None:
        """The oldest pending message of ``bot`` (FIFO keeps firing before resolved), or None."""
        with self._work_lock:
            row = self._work.execute(
                "SELECT id, channel, body, attempts, enqueued_at, next_attempt_at, part, parts, unconfirmed"
                " FROM messages WHERE bot = ? AND state = 'pending' ORDER BY id LIMIT 1",
                (bot,),
            ).fetchone()
        if row is None:
            return None
        return Pending(row[0], row[1], json.loads(row[2]), row[3], row[4], row[5], row[6], row[7], row[8])

    def pending_count(self, bot: str) -> int:
        """Messages of ``bot`` still waiting: the backlog new notifications must share the window with."""
        with self._read_lock:
            row = self._reader.execute(
                "SELECT COUNT(*) FROM messages WHERE bot = ? AND state = 'pending'", (bot,)
            )
            return int(row.fetchone()[0])

    def unrendered_count(self, bot: str) -> int:
        """Notifications of ``bot`` stored but not rendered yet."""
        with self._read_lock:
            row = self._reader.execute(
                "SELECT COUNT(*) FROM notifications WHERE bot = ? AND state = 'pending'", (bot,)
            )
            return int(row.fetchone()[0])

    def mark_delivered(self, message_id: int, now: float) -> None:
        self._update(
            "UPDATE messages SET state='delivered', attempts=attempts+1, done_at=?, code='0' WHERE id=?",
            (now, message_id),
        )

    def mark_retry(
        self, message_id: int, next_attempt_at: float, code: str, reason: str, unconfirmed: bool = False
    ) -> None:
        """Try again at ``next_attempt_at``; ``unconfirmed``: this send got no answer (the bot may have shown
        it), counted in ``Pending.unconfirmed``."""
        self._update(
            "UPDATE messages SET attempts=attempts+1, next_attempt_at=?, code=?, reason=?,"
            " unconfirmed=unconfirmed+? WHERE id=?",
            (next_attempt_at, code, reason, int(unconfirmed), message_id),
        )

    def mark_failed(self, message_id: int, now: float, code: str, reason: str) -> None:
        self._update(
            "UPDATE messages SET state='failed', attempts=attempts+1, done_at=?, code=?, reason=? WHERE id=?",
            (now, code, reason, message_id),
        )

    def record_send(self, bot: str, at: float) -> int:
        """Write down a send to ``bot`` at ``at`` (Unix seconds) before it goes out; returns its id."""
        with self._work_lock:
            cur = self._work.execute("INSERT INTO sends (bot, at) VALUES (?, ?)", (bot, at))
            return int(cur.lastrowid or 0)

    def settle_send(self, send_id: int, at: float) -> None:
        """Correct a recorded send to the time its answer arrived."""
        with self._work_lock:
            self._work.execute("UPDATE sends SET at = ? WHERE id = ?", (at, send_id))

    def cancel_send(self, send_id: int) -> None:
        """Forget a send written ahead whose request never left (the relay stopped first)."""
        with self._work_lock:
            self._work.execute("DELETE FROM sends WHERE id = ?", (send_id,))

    def sends_since(self, bot: str, since: float) -> list[float]:
        """Send times of ``bot`` at or after ``since``, oldest first: what a restart seeds its limiter with."""
        with self._work_lock:
            rows = self._work.execute(
                "SELECT at FROM sends WHERE bot = ? AND at >= ? ORDER BY at", (bot, since)
            ).fetchall()
        return [float(r[0]) for r in rows]

    def rebind(self, channel: str, bot: str) -> int:
        """Point the channel's pending messages and notifications at ``bot`` (its webhook URL changed)."""
        with self._work_lock:
            n = self._work.execute(
                "UPDATE messages SET bot = ? WHERE channel = ? AND state = 'pending' AND bot != ?",
                (bot, channel, bot),
            ).rowcount
            n += self._work.execute(
                "UPDATE notifications SET bot = ? WHERE channel = ? AND state = 'pending' AND bot != ?",
                (bot, channel, bot),
            ).rowcount
            return n

    def pending_bots(self) -> list[tuple[str, str]]:
        """(bot, channel) pairs with pending messages or notifications: what a restart must resume."""
        with self._work_lock:
            return [
                (r[0], r[1])
                for r in self._work.execute(
                    "SELECT DISTINCT bot, channel FROM messages WHERE state='pending' UNION"
                    " SELECT DISTINCT bot, channel FROM notifications WHERE state='pending'"
                )
            ]

    def stats(self) -> list[QueueStats]:
        # Both tables from one snapshot (one read transaction): rendering a notification marks it rendered
        # and inserts its pending messages in one transaction, and two bare SELECTs could fall either side
        # of it, seeing neither the pending notification nor its messages: a backlog of 0 while messages
        # wait (seen as a test that waited for "nothing pending" reading pending rows after it, under load).
        with self._read_lock:
            self._reader.execute("BEGIN")
            try:
                rows = self._reader.execute(
                    "SELECT channel, SUM(state='pending'), MIN(CASE WHEN state='pending' THEN enqueued_at END),"
                    " SUM(state='delivered'), SUM(state='failed') FROM messages GROUP BY channel ORDER BY channel"
                ).fetchall()
                waiting = self._reader.execute(
                    "SELECT channel, COUNT(*), MIN(received_at) FROM notifications WHERE state='pending'"
                    " GROUP BY channel"
                ).fetchall()
            finally:
                self._reader.execute("COMMIT")
        out = {r[0]: [int(r[1] or 0), r[2], int(r[3] or 0), int(r[4] or 0)] for r in rows}
        for channel, count, oldest in waiting:
            row = out.setdefault(channel, [0, None, 0, 0])
            row[0] += int(count)
            row[1] = oldest if row[1] is None else min(row[1], oldest)
        return [QueueStats(ch, *out[ch]) for ch in sorted(out)]

    def messages(self, channel: str | None = None) -> list[dict[str, Any]]:
        """Every message row as a dict (for inspection and tests), oldest first."""
        query = "SELECT id, channel, part, parts, kind, state, attempts, code, reason, body FROM messages"
        args: tuple[Any, ...] = ()
        if channel is not None:
            query += " WHERE channel = ?"
            args = (channel,)
        with self._work_lock:
            rows = self._work.execute(query + " ORDER BY id", args).fetchall()
        keys = ("id", "channel", "part", "parts", "kind", "state", "attempts", "code", "reason", "body")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def test_page(self, page_id: str) -> list[dict[str, Any]]:
        """The notifications holding an alert labelled ``xpuwatch_test_page=<page_id>`` (``xpuwatch rules
        test-page``), oldest first: ``{"channel", "state" (pending | rendered | failed), "reason", "alerts"
        (alert names), "messages": [{"part", "parts", "kind", "state", "attempts", "code", "reason"}]}``.
        ``page_id`` must be 8-64 lowercase hex digits (ValueError): it is matched inside stored payloads."""
        if not (8 <= len(page_id) <= 64 and all(c in "0123456789abcdef" for c in page_id)):
            raise ValueError("a test page id is 8-64 lowercase hex digits")
        with self._work_lock:
            rows = self._work.execute(
                "SELECT id, channel, state, reason, payload FROM notifications"
                " WHERE instr(CAST(payload AS TEXT), ?) > 0 ORDER BY id",  # payloads are stored as BLOBs
                (page_id,),
            ).fetchall()
            out = []
            for nid, channel, state, reason, payload in rows:
                try:
                    alerts = json.loads(payload)["alerts"]
                    names = [
                        a["labels"].get("alertname", "")
                        for a in alerts
                        if a["labels"].get("xpuwatch_test_page") == page_id
                    ]
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
                if not names:
                    continue
                messages = self._work.execute(
                    "SELECT part, parts, kind, state, attempts, code, reason FROM messages"
                    " WHERE notification_id = ? ORDER BY id",
                    (nid,),
                ).fetchall()
                keys = ("part", "parts", "kind", "state", "attempts", "code", "reason")
                out.append(
                    {
                        "channel": channel,
                        "state": state,
                        "reason": reason,
                        "alerts": names,
                        "messages": [dict(zip(keys, m, strict=True)) for m in messages],
                    }
                )
        return out

    def prune(self, before: float, sends_before: float | None = None) -> int:
        """Forget finished messages and notifications older than ``before``, and send times older than
        ``sends_before`` (the sender passes an hour ago: no bot window is longer); returns rows removed."""
        with self._work_lock:
            n = self._work.execute(
                "DELETE FROM messages WHERE state != 'pending' AND done_at < ?", (before,)
            ).rowcount
            n += self._work.execute(
                "DELETE FROM notifications WHERE received_at < ? AND state != 'pending' AND id NOT IN"
                " (SELECT notification_id FROM messages)",
                (before,),
            ).rowcount
        if sends_before is not None:
            with self._work_lock:
                n += self._work.execute("DELETE FROM sends WHERE at < ?", (sends_before,)).rowcount
        return n

    def _update(self, sql: str, args: tuple[Any, ...]) -> None:
        with self._work_lock:
            self._work.execute(sql, args)
