"""Bot request signing. Feishu: ``timestamp`` and ``sign`` fields added to the JSON body. DingTalk:
``timestamp`` and ``sign`` query parameters on the webhook URL (see ``dingtalk_sign``).

Algorithm per Feishu "自定义机器人使用指南" (open.feishu.cn/document/client-docs/bot-v3/add-custom-bot),
section 签名校验: ``string_to_sign = f"{timestamp}\\n{secret}"``, ``sign = base64(HMAC-SHA256(key=
string_to_sign, msg=b""))``, timestamp in seconds, accepted within one hour of Feishu's clock (else 19021).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote_plus


def feishu_sign(timestamp: int, secret: str) -> str:
    """The base64 signature Feishu expects for ``timestamp`` (Unix seconds) and the bot's ``secret``."""
    string_to_sign = f"{timestamp}\n{secret}".encode()
    digest = hmac.new(string_to_sign, b"", digestmod=hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def sign_body(body: dict[str, object], secret: str, now: float) -> dict[str, object]:
    """A copy of ``body`` carrying ``timestamp`` (seconds, as a string) and ``sign`` first; unchanged if no secret."""
    if not secret:
        return body
    ts = int(now)
    return {"timestamp": str(ts), "sign": feishu_sign(ts, secret), **body}


def dingtalk_sign(timestamp_ms: int, secret: str) -> str:
    """DingTalk's ``sign`` query parameter, before URL encoding: ``base64(HMAC-SHA256(key=secret,
    msg=f"{timestamp_ms}\\n{secret}"))`` (DingTalk robot doc, section 加签; timonwong/prometheus-webhook-dingtalk
    ``notifier/notification.go``). Note the key is the secret itself, unlike Feishu."""
    digest = hmac.new(
        secret.encode(), f"{timestamp_ms}\n{secret}".encode(), digestmod=hashlib.sha256
    ).digest()
    return base64.b64encode(digest).decode()


def dingtalk_url(url: str, secret: str, now: float) -> str:
    """``url`` with ``timestamp`` (milliseconds) and the URL-encoded ``sign`` appended; unchanged if no secret.
    DingTalk accepts a timestamp within one hour of its clock (else errcode 310000)."""
    if not secret:
        return url
    ts = int(now * 1000)
    return f"{url}{'&' if '?' in url else '?'}timestamp={ts}&sign={quote_plus(dingtalk_sign(ts, secret))}"
