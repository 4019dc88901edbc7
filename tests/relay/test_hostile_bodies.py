"""The relay's webhook through its real listener against bodies built to hurt (issue 37): a compressed body
is refused (415) before it is read or inflated, credentials or not, and nothing is stored; a
``truncatedAlerts`` no Alertmanager sends is a 400, not a page lost to an overflow. Each fails on main (the
gzip body was inflated and stored: 200; the 4,000-digit number was accepted: 200)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.relay.fakebots import FakeWeCom
from tests.relay.harness import settings_for, start_relay
from xpuwatch.alerts.relay.config import RateLimit

PAYLOAD = Path(__file__).parent.parent / "fixtures" / "alertmanager" / "am-issue2447-firing-captured.json"


async def test_compressed_and_oversized_count_bodies_are_refused(tmp_path: Path) -> None:
    wecom = FakeWeCom(limits=(RateLimit(20, 0.2),))
    await wecom.start()
    h = await start_relay(settings_for(tmp_path, {"oncall": {"type": "wecom", "url": wecom.url()}}))
    body = json.loads(PAYLOAD.read_text())
    packed = gzip.compress(json.dumps(body).encode())
    try:
        for token in ("s3cret-token", ""):
            status, _ = await h.post("oncall", packed, token=token, headers={"Content-Encoding": "gzip"})
            assert status == 415
        status, answer = await h.post("oncall", {**body, "truncatedAlerts": int("9" * 4000)})
        assert status == 400 and "truncatedAlerts" in answer["error"]
        assert (await h.post("oncall", {**body, "truncatedAlerts": 10**9}))[0] == 200  # the bound itself
        stats = h.relay.outbox.stats()
        assert sum(s.pending + s.delivered for s in stats) == 1
    finally:
        await h.close()
        await wecom.stop()
