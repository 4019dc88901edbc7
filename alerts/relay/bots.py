"""Bot registry: channel ``type`` -> the platform module that renders, checks and classifies for it."""

from __future__ import annotations

from xpuwatch.alerts.relay import dingtalk, feishu, wecom
from xpuwatch.alerts.relay.render import Bot

BOTS: dict[str, Bot] = {b.type: b for b in (wecom.BOT, feishu.BOT, dingtalk.BOT)}
