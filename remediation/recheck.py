"""Re-check before acting: is the condition that asked for a disruptive step still true right now?

Between Alertmanager's send and the step lie ``group_wait``, retries, a grace or notice period and the queue
behind the cap, so the alert may have cleared. Right before each disruptive step (taint, evict, stop a
notebook, cordon or reconfigure MIG) the controller asks Prometheus for the alert's series in ``ALERTS``:

| action | steps | series that must be firing |
|---|---|---|
| drain | taint, evict | ``ALERTS{alertstate="firing", action="drain", node, uuid}`` (any drain alert on the device) |
| reclaim | stop | ``ALERTS{alertstate="firing", action="reclaim", namespace, pod}`` (Kubeflow: pod ``<notebook>-0``) |
| resize | cordon, evict, MIG config | ``ALERTS{alertstate="firing", action="resize", node, uuid}`` |

Any alert that asks for the same action on the same device or notebook keeps the step valid (an ECC alert
that cleared while an XID alert on the same card fires still justifies the drain). API: ``GET
/api/v1/query`` (prometheus.io/docs/prometheus/latest/querying/api/); a resolved alert's ``ALERTS`` series
ends with a staleness marker, so an instant query stops returning it at the next rule evaluation.
Prometheus unreachable, slow or answering an error (``unreachable``), or answering what cannot be read
(``unreadable``: over 1 MiB, not the API's JSON, series that are not ``{metric, value}`` such as ``[null]``)
= the condition cannot be confirmed and the step does not run (fail safe; counted, and
``XpuwatchRemediationRecheckFailing`` fires). Queries go through ``alerts/promapi.py``: bounded in time (the
deadline covers decoding) and size, decoded off the event loop, like every Prometheus query xpuwatch makes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import aiohttp

from xpuwatch.alerts.promapi import PromError, Prometheus, Unreadable

IDENTITY: Mapping[str, tuple[str, ...]] = {
    "drain": ("node", "uuid"),
    "reclaim": ("namespace", "pod"),
    "resize": ("node", "uuid"),
}
"""Labels of an ``ALERTS`` series that identify the condition of each action."""

Result = Literal["holds", "cleared", "unreachable", "unreadable"]
RESULTS: tuple[Result, ...] = ("holds", "cleared", "unreachable", "unreadable")
UNCONFIRMED: tuple[Result, ...] = ("unreachable", "unreadable")
"""Results that leave the condition unconfirmed: the step does not run (fail safe)."""


@dataclass(frozen=True)
class Recheck:
    """``result``: holds (the step may run), cleared (cancel it), unreachable or unreadable (do not act; fail
    safe).
    ``query``: the PromQL asked; ``detail``: one line for the audit log and the notice."""

    result: Result
    query: str
    detail: str


def quote(value: str) -> str:
    """A PromQL string literal's body (backslash, double quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def selector(action: str, labels: Mapping[str, str]) -> str:
    """``ALERTS{alertstate="firing",action=...,<identity>}`` for ``action``; labels absent from ``labels``
    are left out (never matched as empty). Raises KeyError for an action without a documented identity."""
    parts = ['alertstate="firing"', f'action="{quote(action)}"']
    parts += [f'{n}="{quote(labels[n])}"' for n in IDENTITY[action] if labels.get(n)]
    return "ALERTS{" + ",".join(parts) + "}"


MAX_ANSWER_BYTES = 2**20
"""1 MiB: a re-check asks for the ALERTS series of one device or notebook, a few series of about 500 bytes
each; a larger answer is not Prometheus answering this query, and is refused unread."""


def client(prometheus_url: str, timeout: float) -> Prometheus:
    """The bounded client of the re-check and the allocation lookup. Raises PromError for a URL that is not
    http(s)."""
    return Prometheus(
        prometheus_url, timeout, MAX_ANSWER_BYTES, settings=("recheck.timeout_seconds", "the re-check's cap")
    )


async def still_holds(
    session: aiohttp.ClientSession,
    prometheus_url: str,
    action: str,
    labels: Mapping[str, str],
    timeout: float = 10.0,
) -> Recheck:
    """Ask Prometheus whether the condition of ``action`` on ``labels`` (its identity labels) still fires."""
    expr = selector(action, labels)
    try:
        found = await client(prometheus_url, timeout).ainstant(session, expr)
    except Unreadable as exc:
        return Recheck("unreadable", expr, f"cannot confirm the condition, not acting: {exc}")
    except PromError as exc:
        return Recheck("unreachable", expr, f"cannot confirm the condition, not acting: {exc}")
    if found:
        names = sorted({x.labels.get("alertname", "") for x in found} - {""})
        return Recheck("holds", expr, f"still firing: {', '.join(names)}")
    return Recheck("cleared", expr, f"condition cleared: no firing {expr}")
