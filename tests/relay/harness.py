"""In-process relay for tests: settings from a dict, the aiohttp app on 127.0.0.1:0, helpers to post and wait."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from xpuwatch.alerts.relay.config import Settings, parse_settings
from xpuwatch.alerts.relay.server import Relay, build_app, build_relay
from xpuwatch.exporter.listener import ConnectionGuard, listen

FIXTURES = Path(__file__).parent.parent / "fixtures"
TOKEN = "s3cret-token"


def alertmanager_fixtures() -> list[Path]:
    return sorted((FIXTURES / "alertmanager").glob("*.json"))


def settings_for(tmp: Path, channels: dict[str, dict[str, Any]], **top: Any) -> Settings:
    """``channels``: name -> channel doc with a literal ``url`` (moved into the environment here)."""
    env = {"RELAY_TOKEN": TOKEN}
    docs = {}
    for name, doc in channels.items():
        doc = dict(doc)
        var = f"URL_{name.upper().replace('-', '_')}"
        env[var] = doc.pop("url")
        if "secret" in doc:
            env[var + "_SECRET"] = doc.pop("secret")
            doc["secret_env"] = var + "_SECRET"
        docs[name] = {"webhook_url_env": var, **doc}
    doc = {
        "outbox": str(tmp / "outbox.sqlite"),
        "auth": {"bearer_token_env": "RELAY_TOKEN"},
        "retry": {"initial_seconds": 0.02, "max_seconds": 0.2, "multiplier": 2},
        "request_timeout_seconds": 2,
        "channels": docs,
        **top,
    }
    return parse_settings(doc, tmp, env)


@dataclass
class Harness:
    relay: Relay
    url: str
    runner: web.AppRunner
    session: aiohttp.ClientSession

    async def post(
        self, channel: str, payload: Any, token: str = TOKEN, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, Any]]:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        hdrs = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
        hdrs.update(headers or {})
        async with self.session.post(f"{self.url}/alertmanager/{channel}", data=data, headers=hdrs) as resp:
            try:
                body = await resp.json(content_type=None)
            except ValueError:
                body = {}
            return resp.status, body

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(f"{self.url}{path}") as resp:
            return resp.status, await resp.text()

    async def settle(self, timeout: float = 30.0) -> None:
        """Wait until no message is pending (a safety bound, not an assertion on speed)."""
        async with asyncio.timeout(timeout):  # polled off the event loop, so the relay runs undisturbed
            while any(s.pending for s in await asyncio.to_thread(self.relay.outbox.stats)):
                await asyncio.sleep(0.02)

    async def close(self) -> None:
        await self.session.close()
        await self.runner.cleanup()


async def start_relay(settings: Settings) -> Harness:
    """The relay's app through the listener the real ``xpuwatch relay`` uses (exporter.listener)."""
    relay = build_relay(settings)
    listening = await listen(build_app(relay), "127.0.0.1", 0, ConnectionGuard())
    port = listening.address[1]
    return Harness(relay, f"http://127.0.0.1:{port}", listening.runner, aiohttp.ClientSession())


def metric_value(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text exposition (0.0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0
