"""The HTTP edge: Alertmanager posts to ``POST /alertmanager/remediate``; also /metrics, /healthz, /readyz.

Answers follow Alertmanager's retry rules (AM 0.25 ``notify/util.go`` ``Retrier.Check``: 2xx done, 5xx
retried, other 4xx dropped for good): 400 with the reason for a malformed body (a resend would not
help), 401 for bad credentials, 413 over ``max_body_bytes``, 503 when this replica is not the leader or
the API server is unreachable (a resend may reach the leader / a recovered API server).
Credentials are compared in constant time (``hmac.compare_digest``; bcrypt for the basic-auth password).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging

import bcrypt
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .alert import PayloadError, parse_payload
from .controller import Controller, NotLeader, Unavailable
from .settings import WebhookSettings

log = logging.getLogger(__name__)
PATH = "/alertmanager/remediate"
CONTROLLER: web.AppKey[Controller] = web.AppKey("controller", Controller)
# A fixed hash checked when the user name is wrong, so timing does not reveal valid user names.
_DUMMY_HASH = bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4))


def authorized(header: str, settings: WebhookSettings) -> bool:
    """True if ``Authorization`` satisfies the configured bearer token or basic credentials (either
    one when both are set); True when neither is configured."""
    if settings.bearer_token is None and settings.basic_user is None:
        return True
    scheme, _, cred = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer" and settings.bearer_token is not None:
        return hmac.compare_digest(cred.strip().encode(), settings.bearer_token.encode())
    if scheme == "basic" and settings.basic_user is not None:
        try:
            user, _, password = base64.b64decode(cred.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user_ok = hmac.compare_digest(user.encode(), settings.basic_user.encode())
        if settings.basic_password_hash is None:
            pw_ok = hmac.compare_digest(password.encode(), (settings.basic_password or "").encode())
            return user_ok and pw_ok and settings.basic_password is not None
        try:
            pw_ok = bcrypt.checkpw(
                password.encode(), settings.basic_password_hash if user_ok else _DUMMY_HASH
            )
        except ValueError:
            return False
        return user_ok and pw_ok
    return False


async def remediate(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    settings = ctl.settings.webhook

    def answer(code: int, doc: object) -> web.Response:
        ctl.telemetry.webhook.labels(str(code)).inc()
        return web.json_response(doc, status=code)

    if not authorized(request.headers.get("Authorization", ""), settings):
        ctl.telemetry.webhook.labels("401").inc()
        return web.json_response(
            {"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": 'Bearer realm="xpuwatch"'}
        )
    if request.content_length is not None and request.content_length > settings.max_body_bytes:
        return answer(413, {"error": f"body over {settings.max_body_bytes} bytes"})
    try:
        body = await request.read()  # bounded by the Application's client_max_size (chunked bodies too)
    except web.HTTPRequestEntityTooLarge:
        return answer(413, {"error": f"body over {settings.max_body_bytes} bytes"})
    try:
        alerts = parse_payload(body)
    except PayloadError as exc:
        return answer(400, {"error": str(exc)})
    try:
        results = await ctl.handle(alerts)
    except NotLeader:
        return answer(503, {"error": "not the leader; retry"})
    except Unavailable as exc:
        return answer(503, {"error": f"kubernetes API unavailable: {exc}"})
    return answer(200, {"alerts": len(alerts), "results": results})


async def metrics(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    resp = web.Response(body=generate_latest(ctl.telemetry.registry))
    resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    return resp


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    if ctl.view.observed_at is None:
        return web.Response(status=503, text="no fleet view yet\n")
    return web.Response(text="ok\n")


def build_app(ctl: Controller) -> web.Application:
    app = web.Application(client_max_size=ctl.settings.webhook.max_body_bytes)
    app[CONTROLLER] = ctl
    app.router.add_post(PATH, remediate)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
