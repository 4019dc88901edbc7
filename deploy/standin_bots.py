"""Demo edge: stand-in WeCom and Feishu group bots that hand every message the relay delivers to a printer.

The demo cannot reach qyapi.weixin.qq.com or open.feishu.cn, so the relay is pointed at these two HTTP
endpoints on 127.0.0.1 instead. They accept what the real custom group bots accept and answer as they do
on success, so the relay records a delivery:

- WeCom "群机器人配置说明" (developer.work.weixin.qq.com/document/path/99110): ``POST
  /cgi-bin/webhook/send?key=<key>`` with ``msgtype`` ``markdown`` / ``markdown_v2`` / ``text``; success is
  HTTP 200 ``{"errcode":0,"errmsg":"ok"}``; an unknown key is ``{"errcode":93000,...}``.
- Feishu "自定义机器人使用指南" (open.feishu.cn/document/client-docs/bot-v3/add-custom-bot): ``POST
  /open-apis/bot/v2/hook/<token>`` with ``msg_type`` ``text`` / ``post`` / ``interactive``; success is HTTP
  200 ``{"StatusCode":0,"StatusMessage":"success","code":0,"data":{},"msg":"success"}``; an unknown token
  is ``{"code":19001,"msg":"param invalid: incoming webhook access token invalid"}``.

They enforce no rate limits and no signatures (the relay's tests do that against stricter fakes).
``to_text`` turns a message body into the plain lines a person would read in the group.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

WECOM_PATH = "/cgi-bin/webhook/send"
FEISHU_PATH = "/open-apis/bot/v2/hook/{token}"
WECOM_OK = {"errcode": 0, "errmsg": "ok"}
FEISHU_OK = {"StatusCode": 0, "StatusMessage": "success", "code": 0, "data": {}, "msg": "success"}


@dataclass(frozen=True)
class BotMessage:
    """One message a bot accepted: ``platform`` wecom|feishu, readable ``text``, arrival (Unix seconds)."""

    platform: str
    text: str
    received_at: float


def _lark_md(element: dict[str, Any]) -> list[str]:
    tag = element.get("tag")
    if tag == "div":
        return [str((element.get("text") or {}).get("content", ""))]
    if tag == "note":
        return [str(e.get("content", "")) for e in element.get("elements") or []]
    if tag == "markdown":
        return [str(element.get("content", ""))]
    return []


def to_text(platform: str, body: dict[str, Any]) -> str:
    """The readable text of a WeCom or Feishu bot message body (unknown shapes: compact JSON)."""
    if platform == "wecom":
        kind = body.get("msgtype", "")
        part = body.get(kind) if isinstance(kind, str) else None
        if isinstance(part, dict) and "content" in part:
            extra = [
                f"@{m}"
                for m in (part.get("mentioned_list") or []) + (part.get("mentioned_mobile_list") or [])
            ]
            return str(part["content"]) + (f"\n{' '.join(extra)}" if extra else "")
    else:
        kind = body.get("msg_type", "")
        content = body.get("content") or {}
        if kind == "text" and isinstance(content, dict):
            return str(content.get("text", ""))
        card = body.get("card")
        if kind == "interactive" and isinstance(card, dict):
            title = ((card.get("header") or {}).get("title") or {}).get("content", "")
            lines = [str(title)]
            for element in card.get("elements") or []:
                lines += _lark_md(element)
            return "\n".join(line for line in lines if line)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


class ChatBots:
    """Both stand-ins in one aiohttp application. ``wecom_key`` / ``feishu_token``: the only key and
    token accepted (the ones written into the relay's webhook URL files)."""

    def __init__(
        self,
        wecom_key: str,
        feishu_token: str,
        on_message: Callable[[BotMessage], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.wecom_key = wecom_key
        self.feishu_token = feishu_token
        self.on_message = on_message
        self.clock = clock
        self.messages: list[BotMessage] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(WECOM_PATH, self.wecom)
        app.router.add_post(FEISHU_PATH, self.feishu)
        return app

    def wecom_url(self, base: str) -> str:
        return f"{base}{WECOM_PATH}?key={self.wecom_key}"

    def feishu_url(self, base: str) -> str:
        return base + FEISHU_PATH.format(token=self.feishu_token)

    def _accept(self, platform: str, body: Any) -> None:
        msg = BotMessage(platform, to_text(platform, body), self.clock())
        self.messages.append(msg)
        self.on_message(msg)

    async def wecom(self, request: web.Request) -> web.Response:
        if request.query.get("key") != self.wecom_key:
            return web.json_response({"errcode": 93000, "errmsg": "invalid webhook url"})
        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.json_response({"errcode": 40035, "errmsg": "invalid json"})
        if not isinstance(body, dict) or body.get("msgtype") not in ("markdown", "markdown_v2", "text"):
            return web.json_response({"errcode": 40008, "errmsg": "invalid message type"})
        self._accept("wecom", body)
        return web.json_response(WECOM_OK)

    async def feishu(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.feishu_token:
            return web.json_response(
                {"code": 19001, "msg": "param invalid: incoming webhook access token invalid", "data": {}}
            )
        try:
            body = json.loads(await request.read())
        except ValueError:
            return web.json_response({"code": 9499, "msg": "Bad Request", "data": {}}, status=400)
        if not isinstance(body, dict) or body.get("msg_type") not in ("text", "post", "interactive"):
            return web.json_response({"code": 9499, "msg": "Bad Request", "data": {}}, status=400)
        self._accept("feishu", body)
        return web.json_response(FEISHU_OK)
