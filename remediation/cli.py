"""``xpuwatch remediate``: load the config, elect a leader, serve the webhook, tick running work."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from xpuwatch.alerts.promapi import duration
from xpuwatch.exporter.logs import config_error
from xpuwatch.exporter.settings import parse_listen_address

from .settings import ConfigError, Settings, load

log = logging.getLogger(__name__)


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "remediate",
        help="run the remediation controller (dry-run unless --apply)",
        description="Receive Alertmanager webhooks and reclaim idle notebooks, resize slices, drain faulty "
        "accelerators, within guardrails. Dry-run (Events, audit, messages only) unless --apply.",
    )
    p.add_argument("--config", required=True, help="YAML config (see docs/remediation.md)")
    p.add_argument("--apply", action="store_true", help="act for real (default: dry-run)")
    p.add_argument(
        "--check", action="store_true", help="validate the config, print the effective settings, exit"
    )
    p.add_argument(
        "--web.listen-address",
        "--listen",
        dest="listen",
        default=None,
        help="[host]:port, overrides webhook.listen_host/listen_port",
    )
    w = p.add_argument_group("what-if (replay a past window; never contacts Kubernetes)")
    w.add_argument(
        "--what-if",
        dest="what_if",
        action="store_true",
        help="print what --apply would have done over --range of past alerts, read from --prometheus",
    )
    w.add_argument("--prometheus", help="Prometheus or VictoriaMetrics URL holding ALERTS and the exporter")
    w.add_argument("--range", type=duration, default=7 * 86400, help="window up to now (default 7d)")
    w.add_argument("--step", type=duration, default=60, help="replay tick and resolution (default 1m)")
    w.add_argument(
        "--repeat-interval",
        dest="repeat_interval",
        type=duration,
        default=4 * 3600,
        help="Alertmanager's repeat_interval: a firing alert held by the cap is retried this often (default 4h)",
    )
    w.add_argument("--nodes", type=int, default=None, help="fleet size for the cap (default: nodes seen)")
    w.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="seconds per query, the whole answer and its decoding included (default 120)",
    )
    w.add_argument("-o", "--output", default=None, help="also write report.json or report.html")
    p.set_defaults(func=run)


def effective(settings: Settings, apply: bool, listen: str | None) -> Settings:
    """Apply CLI overrides: dry-run stays on unless ``--apply`` (or the config says dry_run: false)."""
    guard = dataclasses.replace(settings.guard, dry_run=settings.guard.dry_run and not apply)
    webhook = settings.webhook
    if listen:
        try:
            host, port = parse_listen_address(listen, "--web.listen-address", default_port=9853)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        webhook = dataclasses.replace(webhook, listen_host=host or "0.0.0.0", listen_port=port)
    return dataclasses.replace(settings, guard=guard, webhook=webhook)


def describe(settings: Settings) -> str:
    """Effective settings as JSON with secrets masked (kubeflow#7053: show what is really in force)."""
    doc = dataclasses.asdict(settings)
    for section, key in (
        ("webhook", "bearer_token"),
        ("webhook", "basic_password_hash"),
        ("webhook", "basic_password"),
        ("reclaim", "hub_token"),
    ):
        if doc[section].get(key):
            doc[section][key] = "***"
    if doc.get("notify_token"):
        doc["notify_token"] = "***"
    # a relay password may travel in a notice URL's user info (the demo's basic auth)
    for where, key in ((doc, "notify_url"), *((doc["notify"], c) for c in doc["notify"])):
        parts = urlsplit(where.get(key) or "")
        if parts.password:
            netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
            where[key] = parts._replace(netloc=netloc).geturl()
    return json.dumps(doc, indent=2, default=str)


def run(args: argparse.Namespace) -> int:
    try:
        settings = effective(load(args.config), args.apply, args.listen)
    except (ConfigError, ValueError) as exc:
        return config_error(exc)
    if args.check:
        print(describe(settings))
        return 0
    if args.what_if:
        from .whatif_cli import run as what_if

        return what_if(settings, args)
    log.info("remediation controller starting in %s mode", "dry-run" if settings.guard.dry_run else "APPLY")
    try:
        return asyncio.run(serve(settings))
    except StartupError as exc:
        log.error("%s", exc)
        return 2


class StartupError(Exception):
    """The controller cannot start (no Kubernetes credentials, cannot listen); the message says why."""


async def serve(settings: Settings) -> int:
    # Imported here: every `xpuwatch` subcommand imports this module, and the Kubernetes client is slow
    # to import.
    import aiohttp

    from xpuwatch.exporter.build import MissingExtra, require_extra
    from xpuwatch.exporter.listener import ConnectionGuard, listen

    try:
        require_extra("kubernetes", ("kubernetes_asyncio",), "remediate")
    except MissingExtra as exc:
        raise StartupError(str(exc)) from None
    from .alert import now_utc
    from .audit import Audit
    from .controller import Controller
    from .jupyterhub import Hub
    from .kube import Kube
    from .lease import Elector
    from .telemetry import Telemetry
    from .webhook import build_app

    try:
        kube = await Kube.connect(settings.kube, instance=settings.leader.identity)
    except Exception as exc:  # the config loaders raise several types for a missing/invalid kubeconfig
        path = Path(settings.kube.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config").expanduser()
        why = f"no kubeconfig at {path}" if not path.exists() else f"{path}: {exc}"
        raise StartupError(
            f"no Kubernetes credentials: not in a cluster and {why}; set kube.kubeconfig, kube.host or KUBECONFIG"
        ) from None
    from prometheus_client import CollectorRegistry

    from xpuwatch.exporter.build import register_standard

    telemetry = Telemetry(register_standard(CollectorRegistry()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with aiohttp.ClientSession() as session:
        hub = None
        if settings.reclaim.hub_api_url and settings.reclaim.hub_token:
            hub = Hub(
                session,
                settings.reclaim.hub_api_url,
                settings.reclaim.hub_token,
                settings.reclaim.hub_timeout_seconds,
            )
        elector = Elector(
            kube, settings.leader, on_change=lambda lead: telemetry.leader.set(1 if lead else 0)
        )
        ctl = Controller(
            settings, kube, session, now_utc, Audit(settings.audit_path), telemetry, hub, elector
        )
        guard = ConnectionGuard()  # exporter.listener: the connection limits shared by all three services
        telemetry.registry.register(guard.collector())
        try:
            listening = await listen(
                build_app(ctl), settings.webhook.listen_host, settings.webhook.listen_port, guard
            )
        except OSError as exc:
            await kube.close()
            where = f"{settings.webhook.listen_host}:{settings.webhook.listen_port}"
            raise StartupError(f"cannot listen on {where}: {exc.strerror or exc}") from None

        async def ticker() -> None:
            while not stop.is_set():
                try:
                    await ctl.tick()
                except Exception:  # one bad pass never stops the loop
                    log.exception("tick failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), settings.tick_seconds)

        tasks = [asyncio.create_task(elector.run(now_utc, stop)), asyncio.create_task(ticker())]
        await stop.wait()
        await asyncio.gather(*tasks, return_exceptions=True)
        await elector.release(now_utc())
        await listening.runner.cleanup()
    await kube.close()
    return 0
