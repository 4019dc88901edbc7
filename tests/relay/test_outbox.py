"""The SQLite outbox on its own: durable across reopen, dedup window, render-at-delivery, rebind after a URL
change, pruning, send times for the rate limiter, disk full and corrupt files."""

from __future__ import annotations

import sqlite3

import pytest

from xpuwatch.alerts.relay.outbox import Incoming, Outbox


def incoming(digest: str, now: float, episode: str = "e1", bot: str = "b1") -> Incoming:
    return Incoming("ch", bot, "g", digest, episode, 1, b'{"v": 1}', now, 600.0)


def test_reopen_dedup_render_rebind_and_prune(tmp_path):
    path = str(tmp_path / "o.sqlite")
    o = Outbox(path)
    assert o.enqueue(incoming("d1", 1000.0)).duplicate is False
    assert o.enqueue(incoming("d1", 1500.0)).duplicate is True  # inside the window
    assert o.enqueue(incoming("d2", 1500.0)).duplicate is False  # e.g. another route to the same bot
    assert o.enqueue(incoming("d1", 1700.0, episode="e2")).duplicate is False  # window over
    (first, second, third) = o.unrendered("b1")
    assert (first.payload, first.received_at, first.episode) == (b'{"v": 1}', 1000.0, "e1")
    assert [s.pending for s in o.stats()] == [3]  # not rendered yet, still pending
    assert o.store_rendered(first, "b1", [(1, 1, "part", {"n": 1}), (0, 1, "followup", {"m": 1})], 600.0)
    r2 = o.store_rendered(second, "b1", [(1, 1, "part", {"n": 1}), (0, 1, "followup", {"m": 1})], 600.0)
    assert (r2.stored, r2.skipped) == (1, 1)  # same part, same episode: skipped; the mention never is
    r3 = o.store_rendered(third, "b1", [(1, 1, "part", {"n": 1})], 600.0)
    assert (r3.stored, r3.skipped) == (1, 0)  # same text, new episode (a re-fire): sent again
    assert o.unrendered("b1") == []
    o.close()
    o = Outbox(path)  # what a restart sees
    assert o.pending_count("b1") == 4
    assert o.rebind("ch", "b2") == 4
    msg = o.next_pending("b2")
    assert msg is not None and msg.body == {"n": 1} and msg.enqueued_at == 1000.0
    o.mark_delivered(msg.id, 1800.0)
    msg = o.next_pending("b2")
    assert msg is not None and msg.body == {"m": 1}
    o.mark_failed(msg.id, 1900.0, "93000", "invalid webhook url")
    assert [(s.channel, s.pending, s.delivered, s.failed) for s in o.stats()] == [("ch", 2, 1, 1)]
    assert o.prune(before=1850.0) == 1  # the delivered message; its notification still has messages
    o.close()


def test_send_times_survive_a_restart(tmp_path):
    path = str(tmp_path / "o.sqlite")
    o = Outbox(path)
    ids = [o.record_send("b1", 100.0 + i) for i in range(3)]
    o.settle_send(ids[2], 101.5)
    o.record_send("b2", 100.0)
    o.close()
    o = Outbox(path)
    assert o.sends_since("b1", 100.5) == [101.0, 101.5]
    assert o.prune(before=0.0, sends_before=101.2) == 3  # 100.0, 101.0 of b1 and 100.0 of b2
    assert o.sends_since("b1", 0.0) == [101.5]
    ahead = o.record_send("b1", 130.0)  # written during a wait for the window; the relay stopped first
    o.cancel_send(ahead)
    assert o.sends_since("b1", 0.0) == [101.5]
    o.close()


def test_disk_full_raises_the_real_error_not_a_failed_rollback(tmp_path):
    o = Outbox(str(tmp_path / "o.sqlite"))
    pages = o._db.execute("PRAGMA page_count").fetchone()[0]
    o._db.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: SQLITE_FULL
    big = Incoming("ch", "b1", "g", "d", "e", 1, b"x" * 200_000, 1.0, 600.0)
    with pytest.raises(sqlite3.Error, match="database or disk is full"):
        o.enqueue(big)
    assert o.enqueue(incoming("d2", 2.0)).duplicate is False  # still usable for what fits
    o.close()


def test_corrupt_file_is_quarantined_and_a_fresh_outbox_started(tmp_path, caplog):
    path = tmp_path / "o.sqlite"
    o = Outbox(str(path))
    o.enqueue_many([Incoming("ch", "b1", "g", f"d{i}", "e", 1, b"y" * 2000, 1.0, 600.0) for i in range(200)])
    o._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    o.close()
    data = bytearray(path.read_bytes())
    data[4096 * 3 : 4096 * 3 + 512] = b"\xff" * 512  # scribble over a b-tree page
    path.write_bytes(bytes(data))
    o = Outbox(str(path))
    assert o.quarantined is not None and o.quarantined.startswith(f"{path}.corrupt-")
    assert (tmp_path / o.quarantined.rsplit("/", 1)[1]).read_bytes() == bytes(data)  # kept for inspection
    assert o.stats() == [] and o.enqueue(incoming("d1", 1.0)).duplicate is False
    assert "is corrupt" in caplog.text and "moved to" in caplog.text
    o.close()


def test_not_a_database_is_quarantined_too(tmp_path):
    path = tmp_path / "o.sqlite"
    path.write_bytes(b"this is not sqlite at all" * 100)
    o = Outbox(str(path))
    assert o.quarantined is not None
    o.close()


def test_unopenable_path_is_an_error_not_a_quarantine(tmp_path):
    with pytest.raises(sqlite3.OperationalError):
        Outbox(str(tmp_path / "missing-folder" / "o.sqlite"))


class _RenderBetweenSelects:
    """The outbox's read connection, rendering ``note`` (through the outbox's own ``store_rendered``, on its
    write connection) right after the first SELECT of ``stats``: the moment a concurrent render can fall
    between the messages and the notifications queries."""

    def __init__(self, outbox: Outbox, note) -> None:
        self.conn, self.outbox, self.note, self.fired = outbox._reader, outbox, note, False

    def execute(self, sql: str, *args):
        cur = self.conn.execute(sql, *args)
        if not self.fired and "FROM messages GROUP BY channel" in sql:
            rows = cur.fetchall()
            self.fired = True
            self.outbox.store_rendered(self.note, "b1", [(1, 1, "part", {"text": "x"})], 600.0)
            return _Rows(rows)
        return cur


class _Rows:
    def __init__(self, rows) -> None:
        self.rows = rows

    def fetchall(self):
        return self.rows


def test_stats_reads_both_tables_from_one_snapshot(tmp_path):
    """A notification rendered into messages between stats' two queries is counted once, as pending: the
    relay's backlog never reads 0 while a message waits (a full suite under load saw "nothing pending" and
    then a pending row)."""
    o = Outbox(tmp_path / "o.db")
    try:
        o.enqueue(incoming("d1", 1.0))
        (note,) = o.unrendered("b1")
        proxy = _RenderBetweenSelects(o, note)
        o._reader = proxy  # type: ignore[assignment]
        (stats,) = o.stats()
        assert proxy.fired
        assert stats.pending == 1  # the snapshot before the render: the notification, not 0
        o._reader = proxy.conn
        (after,) = o.stats()
        assert after.pending == 1  # and after it: the message
        assert [m["state"] for m in o.messages()] == ["pending"]
    finally:
        o.close()
