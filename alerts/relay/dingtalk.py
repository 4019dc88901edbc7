"""DingTalk (钉钉) custom group robot: markdown messages, ``at`` mentions, URL signing, response classification.

Follows DingTalk's custom-robot documentation ("自定义机器人接入", open.dingtalk.com/document/robots/custom-robot-
access; security settings in "自定义机器人安全设置") as quoted by public clients, and what the two anchor relays
do: timonwong/prometheus-webhook-dingtalk (``notifier/notification.go``: one ``markdown`` message with ``title``
and ``text``, ``at.atMobiles``/``at.isAtAll``, ``timestamp``+``sign`` query parameters) and PrometheusAlert
(``split=true`` one message per alert, because of errcode 460101 "message too long, exceed 20000 bytes", #318).

- ``POST https://oapi.dingtalk.com/robot/send?access_token=T[&timestamp=MS&sign=S]``, JSON UTF-8.
- Signing: ``sign = urlencode(base64(HMAC-SHA256(key=secret, msg=f"{timestamp_ms}\\n{secret}")))``, timestamp
  in milliseconds within one hour (``signing.dingtalk_url``).
- Limit: 20 messages per minute per robot ("每个机器人每分钟最多发送20条"); over it: errcode 410100 "发送速度太快
  而限流" (the code in DingTalk's current robot error-code table) or 130101 "send too fast, exceed 20 times per
  minute" (older docs and public logs: ccfos/nightingale#369, hippo4j#217); the robot may then be throttled for
  10 minutes (documented in older versions of the robot doc). Both are waits, never failures; so is 90030
  "webhook over limit" (a robot's call quota, reported on Aliyun's developer Q&A [unverified: no capture]).
- Mentions: ``at.atMobiles`` (the number must also appear as ``@138...`` in the text to be highlighted),
  ``at.atUserIds`` (``@userid``), ``at.isAtAll``.
- Errors: HTTP 200 with ``errcode``: 0 ok; 410100, 130101, 90030 rate limited; 310000 security check failed, the ``errmsg``
  says which ("keywords not in content", "sign not match", "ip X not in whitelist";
  timonwong/prometheus-webhook-dingtalk#197, x-cold/dingtalk-robot#7); 300001 token missing or invalid
  [code from public client reports, unverified]; 460101 message too long. -1 "系统繁忙" is retried.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from xpuwatch.alerts.relay.config import Channel, RateLimit
from xpuwatch.alerts.relay.outcome import Outcome
from xpuwatch.alerts.relay.platform import PHONE, MentionKind, check_mentions, dumps, read_answer, within
from xpuwatch.alerts.relay.render import Layout, Markup
from xpuwatch.alerts.relay.signing import dingtalk_url

# 460101 "message too long, exceed 20000 bytes" (timonwong#30, PrometheusAlert#318): budget the whole body.
MAX_BODY_BYTES = 20_000
LIMITS = (RateLimit(count=20, per_seconds=60.0),)  # 每个机器人每分钟最多发送20条
ERR_RATE_LIMITED = 130101  # "send too fast, exceed 20 times per minute" (older doc, public logs)
ERR_RATE_LIMITED_CURRENT = 410100  # "发送速度太快而限流" (current error-code table)
ERR_OVER_LIMIT = 90030  # "webhook over limit": the robot's call quota [reported, unverified]
RATE_LIMIT_CODES = (ERR_RATE_LIMITED, ERR_RATE_LIMITED_CURRENT, ERR_OVER_LIMIT)
ERR_SECURITY = 310000  # keyword / signature / IP allowlist: the errmsg says which
ERR_TOO_LONG = 460101
ERR_SYSTEM_BUSY = -1

MENTIONS = (
    MentionKind("mobiles", PHONE, "a phone number"),
    MentionKind("users", re.compile(r"^[A-Za-z0-9_.@-]{1,64}$"), "a DingTalk userid"),
)
# DingTalk markdown documents no escape syntax either: markup characters become full-width look-alikes.
_ESCAPES = str.maketrans({"<": "＜", ">": "＞", "`": "｀", "*": "＊", "~": "～", "|": "｜", "@": "＠"})
# Underscores stay "_" inside a word (K100_AI, train_job-0, node_exporter): DingTalk's markdown documents only
# `*italic*` (open.dingtalk.com "自定义机器人发送群消息", message types: markdown), and in CommonMark (spec 0.31,
# 6.2 "Emphasis and strong emphasis", rules 2, 4, 6 and 8) a run of "_" with a letter or digit on both sides can neither open nor close
# emphasis. A model, pod or label value copied from a page must stay valid PromQL; a full-width "＿" would not.
# Only a run at a word's edge (_tmp, x_, a _b_ c), which could delimit emphasis, becomes "＿".
_UNDERSCORES = re.compile(r"_+")


def _underscores(m: re.Match[str]) -> str:
    text, start, end = m.string, m.start(), m.end()
    inside = start > 0 and end < len(text) and text[start - 1].isalnum() and text[end].isalnum()
    return m.group() if inside else "＿" * len(m.group())


_LINE_START = re.compile(r"(^|\n)([ \t]*)([#\-+]|\d+\.)")
_LINK_CLOSE = re.compile(r"\](?=\()")
_URL_UNSAFE = str.maketrans({" ": "%20", "(": "%28", ")": "%29", "<": "%3C", ">": "%3E", "\n": "", "\r": ""})


def escape(text: str) -> str:
    """Make user text inert in DingTalk markdown (no headings, lists, emphasis, links, code or @mentions)."""
    text = _LINK_CLOSE.sub("］", _UNDERSCORES.sub(_underscores, text.translate(_ESCAPES)))
    return _LINE_START.sub(lambda m: f"{m.group(1)}{m.group(2)}\u200b{m.group(3)}", text)


def link(text: str, url: str) -> str:
    return f"[{escape(text)}]({url.translate(_URL_UNSAFE)})"


MARKUP = Markup(escape=escape, link=link, atomic=re.compile(r"\[[^\]]*\]\([^)]*\)"))

TITLE_TEMPLATE = (
    "[{% if firing %}FIRING:{{ firing }}{% endif %}{% if firing and resolved %} {% endif %}"
    "{% if resolved %}RESOLVED:{{ resolved }}{% endif %}] {{ group }}"
)
# DingTalk markdown needs a blank line to break a line.
ALERT_TEMPLATE = """\
**{{ alert.alertname }}**{% if alert.severity %} {{ alert.severity }}{% endif %}{% if alert.status == "resolved" %} (resolved){% endif %}

{% for name, text in alert.annotation_list %}> {% if name not in ("summary", "description") %}{{ name }}: {% endif %}{{ text }}

{% endfor %}{% if alert.identity %}> device: {{ alert.identity }}

{% endif %}{% if alert.extra_labels %}> labels: {{ alert.extra_labels }}

{% endif %}> started: {{ alert.starts_at }}{% if alert.ends_at %}, ended: {{ alert.ends_at }}{% endif %}

{% if alert.runbook_url or alert.silence_url %}> {% if alert.runbook_url %}{{ link("runbook", alert.runbook_url) }} {% endif %}{{ link("silence", alert.silence_url) }}{% endif %}"""


@dataclass(frozen=True)
class DingTalkBot:
    """The DingTalk custom-robot platform (see module docstring for the documents it follows)."""

    type: str = "dingtalk"
    markup: Markup = MARKUP
    default_limits: tuple[RateLimit, ...] = LIMITS

    @property
    def default_templates(self) -> dict[str, str]:
        return {"title": TITLE_TEMPLATE, "alert": ALERT_TEMPLATE}

    def check(self, channel: Channel) -> None:
        check_mentions(channel, "DingTalk", MENTIONS)

    def url(self, channel: Channel, now: float) -> str:
        return dingtalk_url(channel.webhook_url, channel.secret, now)

    def assemble(self, layout: Layout, channel: Channel) -> dict[str, Any]:
        title = f"{layout.title}{layout.marker}"
        lines = [f"### {escape(title)}", ""]
        for section in layout.sections:
            lines += [f"**{section.status.capitalize()} ({section.total})**", ""]
            for block in section.blocks:
                lines += [block, ""]
        if layout.overflow:
            lines += [layout.overflow, ""]
        m = channel.mentions
        if layout.mention and (m.mobiles or m.users):
            lines += [" ".join(f"@{x}" for x in (*m.mobiles, *m.users)), ""]
        if channel.keyword:
            lines.append(escape(channel.keyword))
        body: dict[str, Any] = {
            "msgtype": "markdown",
            "markdown": {"title": title, "text": "\n".join(lines).strip()},
        }
        if layout.mention:
            at: dict[str, Any] = {"isAtAll": m.all}
            if m.mobiles:
                at["atMobiles"] = list(m.mobiles)
            if m.users:
                at["atUserIds"] = list(m.users)
            body["at"] = at
        return body

    def fits(self, body: dict[str, Any]) -> bool:
        return within(dumps(body), MAX_BODY_BYTES)

    def followups(self, layout: Layout, channel: Channel) -> list[dict[str, Any]]:
        return []

    def serialise(self, body: dict[str, Any], channel: Channel, now: float) -> bytes:
        return dumps(body)

    def classify(self, http_status: int, payload: bytes) -> Outcome:
        """HTTP status + body -> ok / retry / rate_limited / permanent, with the code recorded."""
        answer = read_answer(http_status, payload, _code, http_429_window=0)
        if isinstance(answer, Outcome):
            return answer
        code, msg = answer
        if code in RATE_LIMIT_CODES:
            return Outcome("rate_limited", str(code), msg, window=0)
        if code == ERR_SYSTEM_BUSY:
            return Outcome("retry", str(code), msg)
        if code == ERR_SECURITY and "sign" in msg:
            msg += " (check the signing secret and the relay host's clock: DingTalk accepts +-1 h)"
        return Outcome("permanent", str(code), msg)


def _code(doc: Any) -> tuple[int, str]:
    return int(doc["errcode"]), str(doc.get("errmsg", ""))


BOT = DingTalkBot()
