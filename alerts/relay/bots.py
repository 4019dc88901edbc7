"""Bot registry: channel ``type`` -> the platform module that renders, checks and classifies for it."""

from __future__ import annotations

from alerts.relay import feishu, wecom
from alerts.relay.render import Bot

BOTS: dict[str, Bot] = {wecom.BOT.type: wecom.BOT, feishu.BOT.type: feishu.BOT}
