"""`xpuwatch relay`: runs the Alertmanager -> WeCom/Feishu/DingTalk relay (hooked into the CLI by xpuwatch/entry.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from dataclasses import replace
from typing import Any

from xpuwatch.alerts.relay.config import ConfigError, load_settings
from xpuwatch.alerts.relay.server import build_app, build_relay
from xpuwatch.exporter.build import register_standard
from xpuwatch.exporter.listener import ConnectionGuard, listen
from xpuwatch.exporter.logs import config_error
from xpuwatch.exporter.settings import parse_listen_address

log = logging.getLogger(__name__)


def add_commands(sub: Any) -> None:
    relay = sub.add_parser(
        "relay", help="relay Alertmanager webhooks to WeCom / Feishu / DingTalk group bots"
    )
    relay.add_argument("--config", required=True, help="channels YAML (see docs/relay.md)")
    relay.add_argument(
        "--web.listen-address",
        "--listen-address",
        dest="listen_address",
        help="[host]:port to listen on (default from config, else :9852)",
    )
    relay.add_argument("--outbox", help="SQLite outbox path (default from config)")
    relay.add_argument("--check", action="store_true", help="validate the config and templates, then exit")
    relay.set_defaults(func=run)


def split_address(address: str, key: str = "listen_address") -> tuple[str, int]:
    """``:9852`` -> ("0.0.0.0", 9852); ``127.0.0.1:0`` -> ("127.0.0.1", 0). ValueError names ``key``."""
    host, port = parse_listen_address(address, key, default_port=9852)
    return (host or "0.0.0.0", port)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        if args.listen_address:
            settings = replace(settings, listen_address=args.listen_address)
        if args.outbox:
            settings = replace(settings, outbox=args.outbox)
        host, port = split_address(
            settings.listen_address, "--web.listen-address" if args.listen_address else "listen_address"
        )
        if args.check:
            from xpuwatch.alerts.relay.server import check_settings

            check_settings(settings)
            print(f"config OK: {len(settings.channels)} channel(s)")
            return 0
        relay = build_relay(settings)
    except (ConfigError, ValueError) as exc:
        return config_error(exc)
    register_standard(relay.metrics.registry)
    try:
        asyncio.run(_serve(relay, host, port))
    except OSError as exc:
        log.error("relay: cannot listen on %s:%d: %s", host, port, exc.strerror or exc)
        return 1
    return 0


async def _serve(relay: Any, host: str, port: int) -> None:
    guard = ConnectionGuard()  # exporter.listener: the connection limits shared by all three services
    relay.metrics.registry.register(guard.collector())
    # Access lines for refused requests (4xx, 5xx) only; accepted notifications are counted by metric
    # (xpuwatch_relay_notifications_received_total) and a line each cost about as much CPU as storing the
    # notification (docs/relay.md "Tests and benchmark"). --log.level=debug writes one for every request.
    listening = await listen(build_app(relay), host, port, guard, access_log_from=400)
    # One parseable line so supervisors and tests can find the port when 0 was asked for.
    print("relay listening on {}:{}".format(*listening.address), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("relay stopping")
    await listening.runner.cleanup()
