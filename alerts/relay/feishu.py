"""Feishu (飞书) / Lark custom bot: interactive cards (card 1.0), signing, response classification.

Follows the official "自定义机器人使用指南" (open.feishu.cn/document/client-docs/bot-v3/add-custom-bot):
body <= 20 KB, 100 requests/minute and 5/second per bot, ``timestamp``+``sign`` in the body when signing
is on (19021 on mismatch), keyword check on text values (19024), ``<at id=...></at>`` in ``lark_md`` by
open_id/user_id or ``all``. Throttling: ``9499 "too many request"`` (HTTP 400, nightingale#1437) or ``11232``
(HTTP 200); other non-zero codes are permanent (19021 sign, 19022 IP, 19024 keyword, 11246 invalid at user,
9499 Bad Request).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from xpuwatch.alerts.relay.config import Channel, RateLimit
from xpuwatch.alerts.relay.outcome import Outcome
from xpuwatch.alerts.relay.platform import MentionKind, check_mentions, dumps, read_answer, within
from xpuwatch.alerts.relay.render import Layout, Markup
from xpuwatch.alerts.relay.signing import sign_body

MAX_BODY_BYTES = 20 * 1024  # official guide: 请求体的数据大小不能超过 20 KB
# Budget: 20,000 bytes (the stricter reading of "20 KB") minus room for "timestamp" and "sign".
BODY_BUDGET_BYTES = 20_000 - 96
LIMITS = (RateLimit(count=5, per_seconds=1.0), RateLimit(count=100, per_seconds=60.0))  # 5/s, 100/min
CODE_FREQUENCY_LIMITED = 11232
CODE_BAD_REQUEST = 9499  # msg "too many request" = throttled; "Bad Request" = malformed or oversize

MENTIONS = (
    MentionKind("open_ids", re.compile(r"^ou_[A-Za-z0-9]{1,64}$"), "an open_id (ou_...)"),
    MentionKind("user_ids", re.compile(r"^[A-Za-z0-9_-]{1,64}$"), "a user_id"),
)
# lark_md renders HTML character references (the card markdown doc's escape table), so every character that
# can start markup is written as one: `<at>`, links, emphasis, strike-through and code cannot be injected.
_ESCAPES = str.maketrans({c: f"&#{ord(c)};" for c in "&<>*_~[]()`\\#"})
_URL_UNSAFE = str.maketrans({" ": "%20", "(": "%28", ")": "%29", "<": "%3C", ">": "%3E", "\n": "", "\r": ""})


def escape(text: str) -> str:
    """Make user text inert in lark_md (reversible with html.unescape)."""
    return text.translate(_ESCAPES)


def link(text: str, url: str) -> str:
    return f"[{escape(text)}]({url.translate(_URL_UNSAFE)})"


MARKUP = Markup(
    escape=escape,
    link=link,
    atomic=re.compile(r"\[[^\]]*\]\([^)]*\)|<at[^>]*>.*?</at>|<font[^>]*>.*?</font>|&#\d+;", re.DOTALL),
)

TITLE_TEMPLATE = (
    "[{% if firing %}FIRING:{{ firing }}{% endif %}{% if firing and resolved %} {% endif %}"
    "{% if resolved %}RESOLVED:{{ resolved }}{% endif %}] {{ group }}"
)
ALERT_TEMPLATE = """\
**{{ alert.alertname }}**{% if alert.severity %} · {{ alert.severity }}{% endif %}{% if alert.status == "resolved" %} · resolved{% endif %}
{% for name, text in alert.annotation_list %}{% if name not in ("summary", "description") %}**{{ name }}**: {% endif %}{{ text }}
{% endfor %}{% if alert.identity %}**device**: {{ alert.identity }}
{% endif %}{% if alert.extra_labels %}**labels**: {{ alert.extra_labels }}
{% endif %}**started**: {{ alert.starts_at }}{% if alert.ends_at %}  **ended**: {{ alert.ends_at }}{% endif %}
{% if alert.runbook_url or alert.silence_url %}{% if alert.runbook_url %}{{ link("runbook", alert.runbook_url) }} {% endif %}{{ link("silence", alert.silence_url) }}{% endif %}"""

# Header colour (card ``header.template``) by status and highest firing severity.
COLOURS = {"critical": "red", "warning": "orange", "info": "blue"}
RESOLVED_COLOUR = "green"


def header_colour(status: str, severity: str) -> str:
    return RESOLVED_COLOUR if status == "resolved" else COLOURS.get(severity, "red")


@dataclass(frozen=True)
class FeishuBot:
    """The Feishu custom-bot platform (see module docstring for the document it follows)."""

    type: str = "feishu"
    markup: Markup = MARKUP
    default_limits: tuple[RateLimit, ...] = LIMITS

    @property
    def default_templates(self) -> dict[str, str]:
        return {"title": TITLE_TEMPLATE, "alert": ALERT_TEMPLATE}

    def check(self, channel: Channel) -> None:
        check_mentions(channel, "Feishu", MENTIONS)

    def url(self, channel: Channel, now: float) -> str:
        return channel.webhook_url

    def assemble(self, layout: Layout, channel: Channel) -> dict[str, Any]:
        elements: list[dict[str, Any]] = []
        for section in layout.sections:
            if elements:
                elements.append({"tag": "hr"})
            label = f"**{section.status.capitalize()} ({section.total})**"
            elements.append(_div(label))
            elements.extend(_div(block) for block in section.blocks)
        if layout.overflow:
            elements.append(_div(layout.overflow))
        if layout.mention:
            m = channel.mentions
            ids = [*m.open_ids, *m.user_ids, *(["all"] if m.all else [])]
            elements.append(_div(" ".join(f"<at id={i}></at>" for i in ids)))
        note = " · ".join(x for x in ("xpuwatch relay", layout.marker.strip(), channel.keyword) if x)
        elements.append({"tag": "note", "elements": [{"tag": "plain_text", "content": note}]})
        return {
            "msg_type": "interactive",
            "card": {
                "config": {"wide_screen_mode": True},
                "header": {
                    "title": {"tag": "plain_text", "content": f"{layout.title}{layout.marker}"},
                    "template": header_colour(layout.status, layout.severity),
                },
                "elements": elements,
            },
        }

    def fits(self, body: dict[str, Any]) -> bool:
        return within(dumps(body), BODY_BUDGET_BYTES)

    def followups(self, layout: Layout, channel: Channel) -> list[dict[str, Any]]:
        return []

    def serialise(self, body: dict[str, Any], channel: Channel, now: float | None = None) -> bytes:
        """Signed (when the channel has a secret) UTF-8 JSON, the exact bytes sent."""
        return dumps(sign_body(body, channel.secret, time.time() if now is None else now))

    def classify(self, http_status: int, payload: bytes) -> Outcome:
        answer = read_answer(http_status, payload, _code, readable_statuses=(200, 400))
        if isinstance(answer, Outcome):
            return answer
        code, msg = answer
        if code == CODE_BAD_REQUEST and "too many" in msg.lower():
            return Outcome("rate_limited", str(code), msg, window=0)  # the 5/s window (nightingale#1437)
        if code == CODE_FREQUENCY_LIMITED:
            return Outcome("rate_limited", str(code), msg, window=1)  # the 100/min window
        if code == 19021:
            msg += " (check the signing secret and the relay host's clock: Feishu accepts +-1 h)"
        return Outcome("permanent", str(code), msg)


def _code(doc: Any) -> tuple[int, str]:
    return int(doc.get("code", doc.get("StatusCode"))), str(doc.get("msg", doc.get("StatusMessage", "")))


def _div(content: str) -> dict[str, Any]:
    return {"tag": "div", "text": {"tag": "lark_md", "content": content}}


BOT = FeishuBot()
