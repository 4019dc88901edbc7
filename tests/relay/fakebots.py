"""Fake WeCom, Feishu and DingTalk group bots at the HTTP level, enforcing the documented behaviour the relay
must handle. They stand in for qyapi.weixin.qq.com, open.feishu.cn and oapi.dingtalk.com, which tests cannot
reach.

FakeWeCom follows the WeCom "群机器人配置说明" (developer.work.weixin.qq.com/document/path/99110) and the
response samples in tests/fixtures/wecom/. FakeFeishu follows Feishu's "自定义机器人使用指南"
(open.feishu.cn/document/client-docs/bot-v3/add-custom-bot) and tests/fixtures/feishu/. FakeDingTalk follows
DingTalk's custom-robot document ("自定义机器人接入" and its security settings, as quoted by public clients; see
alerts/relay/dingtalk.py for the codes and their sources) and tests/fixtures/dingtalk/. All answer business
errors as the real services do (HTTP 200 + code, except Feishu 9499 with HTTP 400), keep every accepted
message, and take rate limits as parameters so tests can shrink the windows.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from xpuwatch.alerts.relay.config import RateLimit
from xpuwatch.alerts.relay.signing import dingtalk_sign, feishu_sign

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _fixture(vendor: str, name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / vendor / name).read_text(encoding="utf-8"))


class Window:
    """Sliding-window counter of accepted requests, as strict as any fixed-window server could be."""

    def __init__(self, limits: Sequence[RateLimit], clock: Callable[[], float]) -> None:
        self.limits = tuple(limits)
        self.clock = clock
        self.times: deque[float] = deque()

    def exceeded(self) -> RateLimit | None:
        now = self.clock()
        for lim in self.limits:
            if sum(1 for t in self.times if t > now - lim.per_seconds) >= lim.count:
                return lim
        return None

    def add(self) -> None:
        self.times.append(self.clock())


@dataclass
class Fault:
    """A scripted answer for the next request: HTTP status + JSON body, or a hang of ``delay`` seconds."""

    status: int = 200
    body: dict[str, Any] | None = None
    delay: float = 0.0


@dataclass
class FakeBot:
    """Shared machinery: an aiohttp server on 127.0.0.1:0, scripted faults, a stall switch, records."""

    limits: Sequence[RateLimit] = ()
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    accepted: list[dict[str, Any]] = field(default_factory=list)  # bodies accepted (code 0), in order
    answers: list[tuple[int, str]] = field(default_factory=list)  # (http status, code) per request
    faults: deque[Fault] = field(default_factory=deque)
    stall_after: int | None = None  # hang (never answer) requests once this many were accepted
    received_event: asyncio.Event = field(default_factory=asyncio.Event)
    base_url: str = ""
    # Server-side latency between receiving a request and counting it against the rate limit (then the answer
    # goes out at once): seconds per request, drawn by the test. The latest a bot can count a request is just
    # before it answers; a relay that counts earlier than that draws rate-limit answers.
    count_delay: Callable[[], float] | None = None
    # A slow bot: it shows (accepts) the message at once and answers this many seconds later. A client that
    # gives up before the answer cannot tell whether the message was shown.
    answer_delay: float = 0.0

    def __post_init__(self) -> None:
        self.window = Window(self.limits, self.clock)
        self._runner: web.AppRunner | None = None
        self._released = asyncio.Event()
        self.stalled = asyncio.Event()  # set when a request is being held by stall_after

    def release(self) -> None:
        """Stop stalling: held requests get an (ignored) answer, new ones are served normally."""
        self.stall_after = None
        self._released.set()

    async def start(self) -> str:
        app = web.Application(client_max_size=10 * 1024 * 1024)
        self.routes(app)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"
        return self.base_url

    async def stop(self) -> None:
        self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def codes(self) -> list[str]:
        return [code for _, code in self.answers]

    async def _scripted(self) -> web.Response | None:
        if self.stall_after is not None and len(self.accepted) >= self.stall_after:
            self.stalled.set()
            await self._released.wait()  # never answered while stalled: the client times out or dies
            self.answers.append((0, "late"))
            return web.json_response({}, status=503)
        if self.faults:
            fault = self.faults.popleft()
            if fault.delay:
                await asyncio.sleep(fault.delay)
                self.answers.append((0, "late"))  # the client gave up long ago: a timeout, as it saw it
                return web.json_response({}, status=fault.status)
            body = fault.body or {}
            self.answers.append(
                (fault.status, str(body.get("errcode", body.get("code", f"http_{fault.status}"))))
            )
            return web.json_response(body, status=fault.status)
        return None

    async def _arrive(self) -> None:
        """Wait ``count_delay()`` seconds before the rate-limit check (see ``count_delay``)."""
        if self.count_delay is not None:
            await asyncio.sleep(self.count_delay())

    def _answer(self, status: int, body: dict[str, Any], code: int) -> web.Response:
        self.answers.append((status, str(code)))
        self.received_event.set()
        return web.json_response(body, status=status)


@dataclass
class FakeWeCom(FakeBot):
    """``POST /cgi-bin/webhook/send?key=KEY``. Enforces: key (93000), markdown content <= 4096 UTF-8 bytes
    and text content <= 2048 (40058), 20 messages/min per robot (45009, ``limits``); answers
    ``answer_delay`` seconds after accepting."""

    keys: set[str] = field(default_factory=lambda: {"good-key"})
    limits: Sequence[RateLimit] = (RateLimit(20, 60.0),)

    def url(self, key: str = "good-key") -> str:
        return f"{self.base_url}/cgi-bin/webhook/send?key={key}"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/cgi-bin/webhook/send", self._send)

    async def _send(self, request: web.Request) -> web.Response:
        scripted = await self._scripted()
        if scripted is not None:
            return scripted
        if request.query.get("key") not in self.keys:
            return self._answer(200, _fixture("wecom", "resp-93000-invalid-webhook-url.json"), 93000)
        try:
            body = json.loads(await request.read())
        except ValueError:
            return self._answer(200, {"errcode": 40035, "errmsg": "invalid json"}, 40035)  # code unverified
        error = check_wecom(body)
        if error is not None:
            return self._answer(200, error, int(error["errcode"]))
        await self._arrive()
        if self.window.exceeded():
            return self._answer(200, _fixture("wecom", "resp-45009-rate-limited.json"), 45009)
        self.window.add()
        self.accepted.append(body)
        if self.answer_delay:
            await asyncio.sleep(self.answer_delay)
        return self._answer(200, _fixture("wecom", "resp-0-ok.json"), 0)


def check_wecom(body: Any) -> dict[str, Any] | None:
    """Static checks of one WeCom robot body; None if acceptable, else the WeCom error body."""
    if not isinstance(body, dict) or body.get("msgtype") not in ("text", "markdown"):
        return {"errcode": 40008, "errmsg": "invalid message type"}  # code unverified
    kind = body["msgtype"]
    content = body.get(kind, {}).get("content")
    if not isinstance(content, str) or not content:
        return {"errcode": 44004, "errmsg": "empty content"}  # code unverified
    limit = 4096 if kind == "markdown" else 2048
    if len(content.encode()) > limit:
        if kind == "markdown":
            return _fixture("wecom", "resp-40058-markdown-too-long.json")
        return {"errcode": 40058, "errmsg": f"text.content exceed max length {limit}"}
    return None


_AT = re.compile(r"<at ([a-z_]+)=([^>]*)>")


@dataclass
class FakeFeishu(FakeBot):
    """``POST /open-apis/bot/v2/hook/TOKEN``. Enforces: token, body <= 20 KB (9499 Bad Request, HTTP 400),
    signature when ``secret`` is set (19021), ``keywords`` in text values (19024), mentions by id only
    (11246), 5/s (9499 "too many request", HTTP 400) and 100/min (11232, HTTP 200) via ``limits``."""

    tokens: set[str] = field(default_factory=lambda: {"good-token"})
    secret: str = ""
    keywords: Sequence[str] = ()
    limits: Sequence[RateLimit] = (RateLimit(5, 1.0), RateLimit(100, 60.0))

    def url(self, token: str = "good-token") -> str:
        return f"{self.base_url}/open-apis/bot/v2/hook/{token}"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/open-apis/bot/v2/hook/{token}", self._send)

    async def _send(self, request: web.Request) -> web.Response:
        scripted = await self._scripted()
        if scripted is not None:
            return scripted
        raw = await request.read()
        if request.match_info["token"] not in self.tokens:
            # Code for a removed bot is not in our fixtures; 19001 as reported by public clients [unverified].
            return self._answer(
                200, {"code": 19001, "msg": "param invalid: incoming webhook access token invalid"}, 19001
            )
        if len(raw) > 20 * 1024:
            return self._answer(400, _fixture("feishu", "resp-9499-bad-request.json"), 9499)
        try:
            body = json.loads(raw)
        except ValueError:
            return self._answer(400, _fixture("feishu", "resp-9499-bad-request.json"), 9499)
        if self.secret:
            ts, sign = body.get("timestamp"), body.get("sign")
            ok = (
                isinstance(ts, str)
                and ts.isdigit()
                and abs(int(ts) - self.wall()) <= 3600
                and sign == feishu_sign(int(ts), self.secret)
            )
            if not ok:
                return self._answer(200, _fixture("feishu", "resp-19021-sign-fail.json"), 19021)
        error = check_feishu(body, self.keywords)
        if error is not None:
            status, payload = error
            return self._answer(status, payload, int(payload["code"]))
        await self._arrive()
        lim = self.window.exceeded()
        if lim is not None:
            if lim.count == self.limits[0].count and lim.per_seconds == self.limits[0].per_seconds:
                return self._answer(400, _fixture("feishu", "resp-9499-too-many-request_http400.json"), 9499)
            return self._answer(200, _fixture("feishu", "resp-11232-frequency-limited_http200.json"), 11232)
        self.window.add()
        self.accepted.append(body)
        return self._answer(200, _fixture("feishu", "resp-0-ok.json"), 0)


def texts(node: Any) -> list[str]:
    """Every text value of a card (``content``/``text`` strings), not ``href``/URLs: what keywords match."""
    out: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("content", "text", "title") and isinstance(v, str):
                out.append(v)
            else:
                out.extend(texts(v))
    elif isinstance(node, list):
        for v in node:
            out.extend(texts(v))
    return out


def check_feishu(body: Any, keywords: Sequence[str] = ()) -> tuple[int, dict[str, Any]] | None:
    """Static checks of one Feishu custom-bot body; None if acceptable, else (HTTP status, error body)."""
    bad = (400, _fixture("feishu", "resp-9499-bad-request.json"))
    if not isinstance(body, dict) or body.get("msg_type") != "interactive":
        return bad
    card = body.get("card")
    if not isinstance(card, dict) or not isinstance(card.get("elements"), list) or "header" not in card:
        return bad
    all_text = texts(card)
    if keywords and not any(k in t for k in keywords for t in all_text):
        return 200, _fixture("feishu", "resp-19024-keyword-not-found.json")
    for t in all_text:
        for attr, value in _AT.findall(t):
            if attr != "id" or "@" in value:
                return 200, _fixture("feishu", "resp-11246-invalid-at-user.json")
    return None


@dataclass
class FakeDingTalk(FakeBot):
    """``POST /robot/send?access_token=TOKEN[&timestamp=MS&sign=SIGN]``. Enforces: token (300001), signature
    and a timestamp within one hour when ``secret`` is set (310000 "sign not match"), ``keywords`` in the
    markdown text or title (310000 "keywords not in content"), markdown needs ``title`` and ``text``, body <=
    20000 bytes (460101), 20 messages/min via ``limits``, answered ``rate_code``: 130101 (older doc, public
    logs) or 410100 (the current error-code table); once over the limit the robot refuses everything for
    ``penalty`` seconds (the doc: "限流10分钟"). Every answer is HTTP 200."""

    tokens: set[str] = field(default_factory=lambda: {"good-token"})
    secret: str = ""
    keywords: Sequence[str] = ()
    limits: Sequence[RateLimit] = (RateLimit(20, 60.0),)
    penalty: float = 600.0
    blocked_until: float = 0.0
    rate_code: int = 130101

    def url(self, token: str = "good-token") -> str:
        return f"{self.base_url}/robot/send?access_token={token}"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/robot/send", self._send)

    async def _send(self, request: web.Request) -> web.Response:
        scripted = await self._scripted()
        if scripted is not None:
            return scripted
        raw = await request.read()
        if request.query.get("access_token") not in self.tokens:
            return self._answer(200, _fixture("dingtalk", "resp-300001-token-not-exist.json"), 300001)
        if self.secret:
            ts, sign = request.query.get("timestamp", ""), request.query.get("sign", "")
            ok = (
                ts.isdigit()
                and abs(int(ts) / 1000 - self.wall()) <= 3600
                and sign == dingtalk_sign(int(ts), self.secret)
            )
            if not ok:
                return self._answer(200, _fixture("dingtalk", "resp-310000-sign-not-match.json"), 310000)
        if len(raw) > 20000:
            return self._answer(200, _fixture("dingtalk", "resp-460101-message-too-long.json"), 460101)
        try:
            body = json.loads(raw)
        except ValueError:
            return self._answer(200, {"errcode": 400, "errmsg": "invalid json"}, 400)  # code unverified
        md = body.get("markdown") if isinstance(body, dict) else None
        if (
            not isinstance(md, dict)
            or body.get("msgtype") != "markdown"
            or not md.get("title")
            or not md.get("text")
        ):
            return self._answer(
                200, {"errcode": 40035, "errmsg": "缺少参数 markdown"}, 40035
            )  # code unverified
        if self.keywords and not any(k in md["text"] or k in md["title"] for k in self.keywords):
            return self._answer(200, _fixture("dingtalk", "resp-310000-keywords-not-in-content.json"), 310000)
        await self._arrive()
        now = self.clock()
        if now < self.blocked_until or self.window.exceeded():
            self.blocked_until = max(self.blocked_until, now + self.penalty)
            name = {130101: "resp-130101-send-too-fast.json", 410100: "resp-410100-send-too-fast.json"}
            return self._answer(200, _fixture("dingtalk", name[self.rate_code]), self.rate_code)
        self.window.add()
        self.accepted.append(body)
        return self._answer(200, _fixture("dingtalk", "resp-0-ok.json"), 0)
