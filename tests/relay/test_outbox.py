"""The SQLite outbox on its own: durable across reopen, dedup window, rebind after a URL change, pruning."""

from __future__ import annotations

from alerts.relay.outbox import Outbox


def enqueue(o: Outbox, digest: str, now: float, body: dict, bot: str = "b1") -> tuple[bool, int, int]:
    r = o.enqueue("ch", bot, "g", digest, 1, [(1, 1, "part", body)], now, 600.0)
    return r.duplicate, r.stored, r.skipped


def test_reopen_dedup_rebind_and_prune(tmp_path):
    path = str(tmp_path / "o.sqlite")
    o = Outbox(path)
    assert enqueue(o, "d1", 1000.0, {"n": 1}) == (False, 1, 0)
    assert enqueue(o, "d1", 1500.0, {"n": 1}) == (True, 0, 0)  # inside the window
    assert enqueue(o, "d2", 1500.0, {"n": 1}) == (False, 0, 1)  # same body inside the window
    assert enqueue(o, "d1", 1700.0, {"n": 2}) == (False, 1, 0)  # window over
    o.close()
    o = Outbox(path)  # what a restart sees
    assert o.pending_count("b1") == 2
    assert o.rebind("ch", "b2") == 2
    first = o.next_pending("b2")
    assert first is not None and first.body == {"n": 1} and first.enqueued_at == 1000.0
    o.mark_delivered(first.id, 1800.0)
    second = o.next_pending("b2")
    assert second is not None and second.body == {"n": 2}
    o.mark_failed(second.id, 1900.0, "93000", "invalid webhook url")
    assert [(s.channel, s.pending, s.delivered, s.failed) for s in o.stats()] == [("ch", 0, 1, 1)]
    # the delivered message and the two notifications without remaining messages; the failed one is newer
    assert o.prune(before=1850.0) == 3
    assert [(m["state"], m["code"]) for m in o.messages()] == [("failed", "93000")]
    o.close()
