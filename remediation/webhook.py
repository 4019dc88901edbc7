"""The HTTP edge: Alertmanager posts to ``POST /alertmanager/remediate``; also /metrics, /healthz, /readyz.

Answers follow Alertmanager's retry rules (AM 0.25 ``notify/util.go`` ``Retrier.Check``: 2xx done, 5xx
retried, other 4xx dropped for good): 400 with the reason for a malformed body (a resend would not
help), 401 for bad credentials, 413 over ``max_body_bytes``, 503 when this replica is not the leader or
the API server is unreachable (a resend may reach the leader / a recovered API server).
Credentials are checked by ``exporter.credentials.Authenticator``: tokens and plain passwords in constant
time, a bcrypt ``password_hash_file`` off the event loop with a bounded number at once (503 beyond, which
Alertmanager retries), verified credentials cached, unknown user names costing as much as known ones.
"""

from __future__ import annotations

import base64
import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from xpuwatch.alerts.payload import BodyError, decode
from xpuwatch.exporter import listener
from xpuwatch.exporter.credentials import Authenticator, Secret, Verdict
from xpuwatch.exporter.listener import BodyLost, BodyTooLarge, read_body

from .alert import PayloadError, parse_payload
from .controller import Controller, NotLeader, Unavailable
from .settings import WebhookSettings

log = logging.getLogger(__name__)
PATH = "/alertmanager/remediate"
APPROVAL_BODY_BYTES = 4096
"""Largest body of an approval POST: ``{"by": "<at most 200 characters>"}`` needs a few hundred bytes."""
CONTROLLER: web.AppKey[Controller] = web.AppKey("controller", Controller)
AUTH: web.AppKey[Authenticator] = web.AppKey("auth", Authenticator)


def authenticator(settings: WebhookSettings) -> Authenticator:
    """The checker for the configured bearer token and/or basic user (bcrypt hash or plain password);
    one that allows everything when neither is configured (``allow_unauthenticated``)."""
    users: dict[str, Secret] = {}
    if settings.basic_user is not None:
        if settings.basic_password_hash is not None:
            users[settings.basic_user] = Secret.hash(settings.basic_password_hash)
        elif settings.basic_password is not None:
            users[settings.basic_user] = Secret.plain(settings.basic_password)
    return Authenticator(users, settings.bearer_token)


async def remediate(request: web.Request) -> web.Response:
    ctl = request.app[CONTROLLER]
    settings = ctl.settings.webhook

    def answer(code: int, doc: object) -> web.Response:
        ctl.telemetry.webhook.labels(str(code)).inc()
        return web.json_response(doc, status=code)

    verdict = await request.app[AUTH].check(request.headers.get("Authorization"))
    if verdict is Verdict.BUSY:
        return answer(503, {"error": "credential checks busy; retry"})
    if verdict is not Verdict.OK:
        ctl.telemetry.webhook.labels("401").inc()
        return web.json_response(
            {"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": 'Bearer realm="xpuwatch"'}
        )
    if request.content_length is not None and request.content_length > settings.max_body_bytes:
        return answer(413, {"error": f"body over {settings.max_body_bytes} bytes"})
    try:
        body = await read_body(request, settings.max_body_bytes)  # chunked bodies too
    except BodyTooLarge:
        return answer(413, {"error": f"body over {settings.max_body_bytes} bytes"})
    except TimeoutError:  # a 5xx: Alertmanager retries (a 4xx would drop the notification)
        return answer(503, {"error": f"body not received within {listener.BODY_TIMEOUT_SECONDS:g} s; retry"})
    except BodyLost:  # the connection is gone: nobody to answer
        return answer(503, {"error": "connection closed before the body arrived"})
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


async def settle(request: web.Request) -> web.Response:
    """``POST /approve/{id}`` or ``/deny/{id}`` with the webhook's credentials; an optional JSON body
    ``{"by": "alice"}`` names the approver (recorded as stated, next to the authenticated identity)."""
    ctl = request.app[CONTROLLER]
    header = request.headers.get("Authorization")
    verdict = await request.app[AUTH].check(header)
    if verdict is Verdict.BUSY:
        return web.json_response({"error": "credential checks busy; retry"}, status=503)
    if verdict is not Verdict.OK:
        return web.json_response(
            {"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": 'Bearer realm="xpuwatch"'}
        )
    who = _identity(header)
    doc: object = {}
    if request.can_read_body:
        try:
            body = await read_body(request, APPROVAL_BODY_BYTES)
        except BodyTooLarge:
            return web.json_response({"error": f"body over {APPROVAL_BODY_BYTES} bytes"}, status=413)
        except TimeoutError:
            return web.json_response(
                {"error": f"body not received within {listener.BODY_TIMEOUT_SECONDS:g} s"}, status=408
            )
        except BodyLost:
            return web.json_response({"error": "connection closed before the body arrived"}, status=400)
        try:
            doc = decode(body) if body.strip() else {}  # bounded nesting, Unicode text: as the webhook
        except BodyError as exc:
            return web.json_response({"error": str(exc)}, status=400)
    stated = doc.get("by") if isinstance(doc, dict) else None
    if stated is not None and (not isinstance(stated, str) or len(stated) > 200):
        return web.json_response({"error": "by: expected a string of at most 200 characters"}, status=400)
    by = f"{stated} (stated; {who})" if stated else who
    approve = request.match_info["verb"] == "approve"
    try:
        result = await ctl.decide_pending(request.match_info["id"], approve, by)
    except Unavailable as exc:
        return web.json_response({"error": f"kubernetes API unavailable: {exc}"}, status=503)
    if result is None:
        return web.json_response({"error": "no pending decision with that id"}, status=404)
    return web.json_response(result)


def _identity(header: str | None) -> str:
    """The authenticated identity of an approval POST: the basic-auth user, else the bearer token."""
    scheme, _, rest = (header or "").partition(" ")
    if scheme.lower() == "basic":
        try:
            return "POST by user " + base64.b64decode(rest.strip()).decode().partition(":")[0]
        except (ValueError, UnicodeDecodeError):
            return "POST (basic auth)"
    return (
        "POST by the holder of the bearer token" if scheme.lower() == "bearer" else "POST (unauthenticated)"
    )


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
    app[AUTH] = auth = authenticator(ctl.settings.webhook)

    async def close_auth(app: web.Application) -> None:
        auth.close()

    app.on_cleanup.append(close_auth)
    app.router.add_post(PATH, remediate)
    app.router.add_post("/{verb:approve|deny}/{id:[0-9a-f]{12}}", settle)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app
