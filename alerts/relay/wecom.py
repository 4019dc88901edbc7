"""WeCom (企业微信) group robot: markdown messages, mention follow-ups, response classification.

Follows the official doc "群机器人配置说明" (developer.work.weixin.qq.com/document/path/99110): markdown
``content`` <= 4096 UTF-8 bytes, text ``content`` <= 2048 bytes, 20 messages per minute per robot,
``<@userid>`` inside markdown, ``mentioned_mobile_list`` only on ``text``. Responses are HTTP 200 with
``errcode`` (0 ok; 45009 frequency limit; 93000 invalid webhook key; 40058 content too long).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from xpuwatch.alerts.relay.config import Channel, RateLimit
from xpuwatch.alerts.relay.outcome import Outcome
from xpuwatch.alerts.relay.platform import PHONE, MentionKind, check_mentions, dumps, read_answer, within
from xpuwatch.alerts.relay.render import Layout, Markup

MARKDOWN_MAX_BYTES = 4096  # official doc: markdown.content 最长不超过4096个字节, UTF-8
TEXT_MAX_BYTES = 2048  # official doc: text.content 最长不超过2048个字节, UTF-8
LIMITS = (RateLimit(count=20, per_seconds=60.0),)  # official doc: 每个机器人发送的消息不能超过20条/分钟
ERR_RATE_LIMITED = 45009  # "api freq out of limit" (fixture resp-45009-rate-limited.json)
ERR_BAD_KEY = 93000  # "invalid webhook url" (fixture resp-93000-invalid-webhook-url.json)
ERR_TOO_LONG = 40058  # "markdown.content exceed max length 4096" (PrometheusAlert#155)
ERR_SYSTEM_BUSY = -1  # WeCom global code "系统繁忙": retry

MENTIONS = (
    MentionKind("users", re.compile(r"^[A-Za-z0-9_.@-]{1,64}$"), "a WeCom userid"),
    MentionKind("mobiles", PHONE, "a phone number", also=("@all",)),
)
# No escape syntax is documented for WeCom markdown, so characters that start markup are replaced by their
# full-width look-alikes: the text stays readable and can never open a tag, mention, link or code span.
_ESCAPES = str.maketrans({"<": "＜", ">": "＞", "`": "｀", "*": "＊"})
_LINE_START_HASH = re.compile(r"(^|\n)([ \t]*)#")
_LINK_CLOSE = re.compile(r"\](?=\()")  # "](" is what turns brackets into a link; lone brackets stay
_URL_UNSAFE = str.maketrans({" ": "%20", "(": "%28", ")": "%29", "<": "%3C", ">": "%3E", "\n": "", "\r": ""})


def escape(text: str) -> str:
    """Make user text inert in WeCom markdown (see _ESCAPES)."""
    return _LINK_CLOSE.sub("］", _LINE_START_HASH.sub(r"\1\2＃", text.translate(_ESCAPES)))


def link(text: str, url: str) -> str:
    return f"[{escape(text)}]({url.translate(_URL_UNSAFE)})"


MARKUP = Markup(
    escape=escape,
    link=link,
    atomic=re.compile(r"\[[^\]]*\]\([^)]*\)|<font[^>]*>.*?</font>|<@[^>]*>", re.DOTALL),
)

TITLE_TEMPLATE = (
    "[{% if firing %}FIRING:{{ firing }}{% endif %}{% if firing and resolved %} {% endif %}"
    "{% if resolved %}RESOLVED:{{ resolved }}{% endif %}] {{ group }}"
)
ALERT_TEMPLATE = """\
{% if alert.status == "firing" %}<font color="warning">FIRING</font>{% else %}<font color="info">RESOLVED</font>{% endif %} **{{ alert.alertname }}**{% if alert.severity %} {{ alert.severity }}{% endif %}
{% for name, text in alert.annotation_list %}> {% if name not in ("summary", "description") %}{{ name }}: {% endif %}{{ text }}
{% endfor %}{% if alert.identity %}> device: {{ alert.identity }}
{% endif %}{% if alert.extra_labels %}> labels: {{ alert.extra_labels }}
{% endif %}> started: {{ alert.starts_at }}{% if alert.ends_at %}, ended: {{ alert.ends_at }}{% endif %}
{% if alert.runbook_url or alert.silence_url %}> {% if alert.runbook_url %}{{ link("runbook", alert.runbook_url) }} {% endif %}{{ link("silence", alert.silence_url) }}{% endif %}"""

_SECTION_COLOUR = {"firing": "warning", "resolved": "info"}


@dataclass(frozen=True)
class WeComBot:
    """The WeCom group-robot platform (see module docstring for the document it follows)."""

    type: str = "wecom"
    markup: Markup = MARKUP
    default_limits: tuple[RateLimit, ...] = LIMITS

    @property
    def default_templates(self) -> dict[str, str]:
        return {"title": TITLE_TEMPLATE, "alert": ALERT_TEMPLATE}

    def check(self, channel: Channel) -> None:
        check_mentions(channel, "WeCom", MENTIONS)

    def url(self, channel: Channel, now: float) -> str:
        return channel.webhook_url

    def assemble(self, layout: Layout, channel: Channel) -> dict[str, Any]:
        lines = [f"## {escape(layout.title)}{layout.marker}"]
        for section in layout.sections:
            colour = _SECTION_COLOUR.get(section.status, "comment")
            lines.append(f'<font color="{colour}">**{section.status.capitalize()} ({section.total})**</font>')
            lines.extend(f"{block}\n" for block in section.blocks)
        if layout.overflow:
            lines.append(layout.overflow)
        if layout.mention and channel.mentions.users:
            lines.append(" ".join(f"<@{u}>" for u in channel.mentions.users))
        return {"msgtype": "markdown", "markdown": {"content": "\n".join(lines).strip()}}

    def fits(self, body: dict[str, Any]) -> bool:
        if body.get("msgtype") == "text":
            return within(body["text"]["content"], TEXT_MAX_BYTES)
        return within(body["markdown"]["content"], MARKDOWN_MAX_BYTES)

    def followups(self, layout: Layout, channel: Channel) -> list[dict[str, Any]]:
        m = channel.mentions
        if not (m.mobiles or m.all):
            return []
        content = layout.title.encode()[:TEXT_MAX_BYTES].decode(errors="ignore")
        text: dict[str, Any] = {"content": content}
        if m.all:
            text["mentioned_list"] = ["@all"]
        if m.mobiles:
            text["mentioned_mobile_list"] = list(m.mobiles)
        return [{"msgtype": "text", "text": text}]

    def serialise(self, body: dict[str, Any], channel: Channel, now: float) -> bytes:
        return dumps(body)

    def classify(self, http_status: int, payload: bytes) -> Outcome:
        """HTTP status + body -> ok / retry / rate_limited / permanent, with the code recorded."""
        answer = read_answer(http_status, payload, _code)
        if isinstance(answer, Outcome):
            return answer
        code, msg = answer
        if code == ERR_RATE_LIMITED:
            return Outcome("rate_limited", str(code), msg, window=0)  # 20/min, the only window
        if code == ERR_SYSTEM_BUSY:
            return Outcome("retry", str(code), msg)
        return Outcome("permanent", str(code), msg)


def _code(doc: Any) -> tuple[int, str]:
    return int(doc["errcode"]), str(doc.get("errmsg", ""))


BOT = WeComBot()
