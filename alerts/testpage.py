"""Test page: one alert per category sent through the path a site configured, and what each hop answered.

``xpuwatch rules test-page`` (alerts/cli.py). With an Alertmanager URL the alerts are posted to its API v2
(``POST /api/v2/alerts``, as Prometheus does) and travel the site's own routing tree, inhibitions included;
without one they are posted to the relay as the webhook notifications Alertmanager would send
(``POST /alertmanager/<channel>``, payload version 4 per Alertmanager's docs/configuration.md
``<webhook_config>``) to the channels the spec names. Then each hop's answer is read back:

- Alertmanager: the HTTP status of the post, then each alert's state and receivers from ``GET /api/v2/alerts``
  (``suppressed`` names the alert that inhibits it: kube-prometheus-stack's ``InfoInhibitor``, say);
- the relay: the channel it stored the notification for (``GET /api/v1/test-pages/<id>``);
- the bot: the relay's record of each message (``delivered``, the bot's code; or the bot's error code and
  message, e.g. DingTalk ``310000 keywords not in content``).

The alerts carry ``action="none"`` (the remediation controller never acts on them), a node name that is no
node (``xpuwatch-test-page``), no ``uuid`` (no xpuwatch inhibition takes them as source or target) and the
label ``xpuwatch_test_page=<id>``, a random id that finds them again. Names are
:data:`alerts.alertmanager.TEST_PAGE_ALERTS`, one per category.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from xpuwatch.alerts.alertmanager import RELAY_PATH, TEST_PAGE_ALERTS
from xpuwatch.alerts.spec import Spec, duration_seconds
from xpuwatch.exporter.catalog import RELAY_REJECTED

PAGE_LABEL = "xpuwatch_test_page"
NODE = "xpuwatch-test-page"
# Hardware and meta page (critical: on-call mentions configured for critical are tested too); performance is
# the quiet stream's warning.
SEVERITY = {"hardware": "critical", "performance": "warning", "meta": "critical"}
ZERO_TIME = "0001-01-01T00:00:00Z"  # endsAt of a firing alert in a webhook payload (Alertmanager's flush)
POLL_SECONDS = 1.0
SLACK_SECONDS = 60.0  # beyond the longest group_wait: the relay's rendering, rate limits and the bot's answer


@dataclass(frozen=True)
class Target:
    """Where the page goes. ``alertmanager_url`` "" = straight to the relay; ``relay_url`` "" = do not ask the
    relay (the bot's answer stays unknown); ``relay_token``: the bearer token the relay expects."""

    alertmanager_url: str = ""
    relay_url: str = ""
    relay_token: str = ""
    timeout_seconds: float = 0.0
    """How long to wait for the bots' answers; 0 = :func:`wait_seconds` of the spec."""


@dataclass(frozen=True)
class Answer:
    """One hop's answer for one category: ``hop`` is alertmanager | relay | bot; ``ok`` None = not asked."""

    category: str
    hop: str
    ok: bool | None
    text: str

    def line(self) -> str:
        mark = {True: "ok", False: "FAIL", None: "-"}[self.ok]
        return f"{self.category:<12} {self.hop:<13} {mark:<5} {self.text}"


def new_page_id() -> str:
    """16 random lowercase hex digits (the relay's status endpoint accepts 8-64)."""
    return secrets.token_hex(8)


def channels(spec: Spec) -> dict[str, str]:
    """Category -> the relay channel its alerts reach (= receiver name; meta: ``routing.meta.relay_channel``)."""
    ro = spec.routing
    out = {"hardware": ro.hardware.receiver, "performance": ro.performance.receiver}
    out["meta"] = ro.meta_relay_channel if ro.meta is not None else ro.root_receiver
    return out


def wait_seconds(spec: Spec) -> float:
    """The longest ``group_wait`` of the routes a test page takes, plus :data:`SLACK_SECONDS`."""
    ro = spec.routing
    routes = [ro.hardware, ro.performance] + ([ro.meta] if ro.meta is not None else [])
    return max(duration_seconds(r.group_wait) for r in routes) + SLACK_SECONDS


def page_alerts(page_id: str, now: datetime, ends: datetime) -> list[dict[str, Any]]:
    """The three alerts in Alertmanager's API v2 form (``postableAlerts``), hardware, performance, meta."""
    return [
        {
            "labels": {
                "alertname": name,
                "category": category,
                "severity": SEVERITY[category],
                "action": "none",
                "node": NODE,
                PAGE_LABEL: page_id,
            },
            "annotations": {
                "summary": f"xpuwatch test page ({category})",
                "description": f"Sent by `xpuwatch rules test-page` (id {page_id}) to check the {category} "
                "path from Alertmanager to this group. No action needed.",
            },
            "startsAt": _rfc3339(now),
            "endsAt": _rfc3339(ends),
        }
        for category, name in TEST_PAGE_ALERTS.items()
    ]


def _rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def webhook(alert: Mapping[str, Any], channel: str, page_id: str) -> dict[str, Any]:
    """The webhook notification Alertmanager would send for ``alert`` to the receiver ``channel``."""
    labels = dict(alert["labels"])
    group = {"alertname": labels["alertname"], PAGE_LABEL: page_id}
    return {
        "version": "4",
        "groupKey": "{}:{" + ", ".join(f'{k}="{v}"' for k, v in group.items()) + "}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": channel,
        "groupLabels": group,
        "commonLabels": labels,
        "commonAnnotations": dict(alert["annotations"]),
        "externalURL": "",
        "alerts": [
            {
                "status": "firing",
                "labels": labels,
                "annotations": dict(alert["annotations"]),
                "startsAt": alert["startsAt"],
                "endsAt": ZERO_TIME,
                "generatorURL": "",
                "fingerprint": page_id,
            }
        ],
    }


async def _text(resp: aiohttp.ClientResponse) -> str:
    body = await resp.text()
    try:
        doc = json.loads(body)
    except ValueError:
        return " ".join(body.split())[:300]
    if isinstance(doc, dict) and "error" in doc:
        return str(doc["error"])[:300]
    if isinstance(doc, dict) and "status" in doc:
        return str(doc["status"])
    return " ".join(body.split())[:300]


async def run(
    spec: Spec,
    target: Target,
    page_id: str,
    emit: Callable[[Answer], None] = lambda a: None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[Answer]:
    """Send the test page and collect each hop's answer (``emit`` sees each as it comes). Never raises for a
    hop that fails: a refused post, an unreachable service or a bot error is an Answer with ok False."""
    answers: list[Answer] = []

    def say(answer: Answer) -> None:
        answers.append(answer)
        emit(answer)

    timeout = target.timeout_seconds or wait_seconds(spec)
    start = now()
    alerts = page_alerts(page_id, start, start + timedelta(seconds=timeout + 300))
    by_category = dict(zip(TEST_PAGE_ALERTS, alerts, strict=True))
    chans = channels(spec)
    headers = {"Authorization": f"Bearer {target.relay_token}"} if target.relay_token else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        if target.alertmanager_url:
            sent = await _through_alertmanager(
                http, target.alertmanager_url.rstrip("/"), alerts, page_id, say
            )
        else:
            sent = await _to_relay(
                http, target.relay_url.rstrip("/"), headers, by_category, chans, page_id, say
            )
        if sent:
            if target.relay_url:
                relay = target.relay_url.rstrip("/")
                via_am = bool(target.alertmanager_url)
                await _bot_answers(http, relay, headers, sent, page_id, timeout, say, via_am)
            else:
                for category in sent:
                    say(
                        Answer(
                            category, "bot", None, "not asked: give --relay-url to follow the page to the bot"
                        )
                    )
        if target.alertmanager_url and sent:  # resolve them: Alertmanager sends the resolved notification
            ended = _rfc3339(now())
            try:
                async with http.post(
                    f"{target.alertmanager_url.rstrip('/')}/api/v2/alerts",
                    json=[{**a, "endsAt": ended} for a in alerts],
                ):
                    pass
            except aiohttp.ClientError:
                pass  # they end on their own at endsAt
    return answers


async def _through_alertmanager(
    http: aiohttp.ClientSession,
    base: str,
    alerts: list[dict[str, Any]],
    page_id: str,
    say: Callable[[Answer], None],
) -> list[str]:
    """Post to Alertmanager and read each alert's state back; the categories it accepted and routes."""
    try:
        async with http.post(f"{base}/api/v2/alerts", json=alerts) as resp:
            status, text = resp.status, await _text(resp)
    except (aiohttp.ClientError, TimeoutError) as exc:
        for category in TEST_PAGE_ALERTS:
            say(Answer(category, "alertmanager", False, f"{base}: {type(exc).__name__}: {exc}"))
        return []
    if status != 200:
        for category in TEST_PAGE_ALERTS:
            say(Answer(category, "alertmanager", False, f"HTTP {status}: {text}"))
        return []
    found: dict[str, dict[str, Any]] = {}
    every: list[dict[str, Any]] = []
    for _ in range(20):  # the post is applied at once; a few polls cover a loaded machine
        async with http.get(f"{base}/api/v2/alerts") as resp:
            every = await resp.json() if resp.status == 200 else []
        found = {a["labels"].get("category", ""): a for a in every if a["labels"].get(PAGE_LABEL) == page_id}
        settled = all(a["status"]["state"] != "unprocessed" for a in found.values())
        if len(found) == len(TEST_PAGE_ALERTS) and settled:
            break
        await asyncio.sleep(0.25)
    names = {a["fingerprint"]: a["labels"].get("alertname", "?") for a in every}
    sent = []
    for category in TEST_PAGE_ALERTS:
        alert = found.get(category)
        if alert is None:
            say(Answer(category, "alertmanager", False, "HTTP 200, but the alert is not in /api/v2/alerts"))
            continue
        state = alert["status"]["state"]
        receivers = [r["name"] for r in alert.get("receivers", [])]
        text = f"HTTP 200, {state}, receivers {', '.join(receivers) or '(none)'}"
        by = alert["status"].get("inhibitedBy") or []
        if by:
            text += f"; inhibited by {', '.join(names.get(f, f) for f in by)}"
        if alert["status"].get("silencedBy"):
            text += f"; silenced by {', '.join(alert['status']['silencedBy'])}"
        ok = state == "active"
        say(Answer(category, "alertmanager", ok, text))
        if ok:
            sent.append(category)
    return sent


async def _to_relay(
    http: aiohttp.ClientSession,
    base: str,
    headers: Mapping[str, str],
    alerts: Mapping[str, dict[str, Any]],
    chans: Mapping[str, str],
    page_id: str,
    say: Callable[[Answer], None],
) -> list[str]:
    """Post one webhook notification per category to its channel; the categories the relay stored."""
    sent = []
    for category, alert in alerts.items():
        channel = chans[category]
        url = f"{base}{RELAY_PATH}{channel}"
        try:
            async with http.post(url, json=webhook(alert, channel, page_id), headers=headers) as resp:
                status, text = resp.status, await _text(resp)
        except (aiohttp.ClientError, TimeoutError) as exc:
            say(Answer(category, "relay", False, f"{url}: {type(exc).__name__}: {exc}"))
            continue
        ok = status == 200
        say(Answer(category, "relay", ok, f"channel {channel}: HTTP {status} {text}"))
        if ok:
            sent.append(category)
    return sent


def _done(note: Mapping[str, Any]) -> bool:
    if note["state"] == "failed":
        return True
    return note["state"] == "rendered" and all(m["state"] != "pending" for m in note["messages"])


def _bot_text(note: Mapping[str, Any]) -> tuple[bool, str]:
    if note["state"] == "failed":
        return False, f"channel {note['channel']}: not rendered ({note['reason']})"
    if note["state"] == "pending":
        return False, f"channel {note['channel']}: not rendered yet"
    parts, ok = [], True
    for m in note["messages"]:
        where = f"message {m['part']}/{m['parts']}" + (f" ({m['kind']})" if m["kind"] != "part" else "")
        if m["state"] == "delivered":
            parts.append(f"{where} delivered, bot answered code {m['code']}")
        elif m["state"] == "failed":
            ok = False
            parts.append(f"{where} FAILED: {m['code']} {m['reason']}")
        else:
            ok = False
            last = f", last answer {m['code']} {m['reason']}" if m["code"] else ""
            parts.append(f"{where} pending after {m['attempts']} attempts{last}")
    if not parts:
        return True, f"channel {note['channel']}: nothing new to send (a repeat within the dedup window)"
    return ok, f"channel {note['channel']}: " + "; ".join(parts)


async def _bot_answers(
    http: aiohttp.ClientSession,
    base: str,
    headers: Mapping[str, str],
    categories: list[str],
    page_id: str,
    timeout: float,
    say: Callable[[Answer], None],
    relay_hop: bool,
) -> None:
    """Poll the relay until each category's notification is delivered or failed, or ``timeout`` passes.
    ``relay_hop``: also say which channel stored it (through Alertmanager the relay's own answer went to
    Alertmanager, not to us)."""
    wanted = {TEST_PAGE_ALERTS[c]: c for c in categories}
    refused_before = await _refusals(http, base)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    notes: dict[str, dict[str, Any]] = {}
    problem = ""
    while True:
        try:
            async with http.get(f"{base}/api/v1/test-pages/{page_id}", headers=headers) as resp:
                if resp.status == 200:
                    doc = await resp.json()
                    problem = ""
                    for note in doc["notifications"]:
                        for name in note["alerts"]:
                            if name in wanted:
                                notes[wanted[name]] = note
                else:
                    problem = f"HTTP {resp.status}: {await _text(resp)}"
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if (problem and problem.startswith("HTTP 4")) or (
            len(notes) == len(wanted) and all(_done(n) for n in notes.values())
        ):
            break
        if loop.time() >= deadline:
            break
        await asyncio.sleep(POLL_SECONDS)
    refused = {
        reason: n - refused_before.get(reason, 0)
        for reason, n in (await _refusals(http, base)).items()
        if n > refused_before.get(reason, 0)
    }
    for category in categories:
        note = notes.get(category)
        if note is None:
            why = problem or f"no notification reached the relay within {timeout:.0f} s"
            if refused:
                why += "; meanwhile the relay refused " + ", ".join(
                    f"{n:g} ({r})" for r, n in sorted(refused.items())
                )
                if "unknown_channel" in refused:
                    why += ": a receiver without a relay channel of its name"
            say(Answer(category, "relay" if relay_hop else "bot", False, why))
            continue
        ok, text = _bot_text(note)
        if relay_hop:
            say(Answer(category, "relay", True, f"channel {note['channel']}: notification stored"))
        say(Answer(category, "bot", ok, text))


async def _refusals(http: aiohttp.ClientSession, base: str) -> dict[str, float]:
    """The relay's ``xpuwatch_relay_requests_rejected_total`` by reason from its /metrics ({} if unread)."""
    try:
        async with http.get(f"{base}/metrics") as resp:
            text = await resp.text() if resp.status == 200 else ""
    except (aiohttp.ClientError, TimeoutError):
        return {}
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == RELAY_REJECTED.name:
                    out[sample.labels.get("reason", "")] = sample.value
    except ValueError:
        return {}
    return out
