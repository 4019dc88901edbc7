"""Actions: one module per remediation (reclaim, resize, drain); each step is an async function of a
``Context``, a ``Decision`` or persisted ``Progress``, and the injected clock, returning an ``Outcome``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import aiohttp

from ..jupyterhub import Hub
from ..kube import Kube, ObjectRef
from ..recheck import Recheck
from ..settings import Settings

Result = Literal["ok", "failed", "blocked", "skipped"]


@dataclass(frozen=True)
class Outcome:
    """``ok``: the step did what it says; ``blocked``: could not act now, retried later (PDB, probe
    failure); ``skipped``: nothing to do (already done, notebook active); ``failed``: gave up or broke."""

    result: Result
    detail: str


# report(action, step, target_ref, outcome, now, event_reason, warning) -> audit + Event + metric
Report = Callable[[str, str, ObjectRef, Outcome, datetime, str, bool], Awaitable[None]]


# confirm(action, step, identity labels, now) -> None: the condition still holds, go ahead; else why the
# step must not run (result cleared, or unreachable/unreadable: fail safe), already counted, audited and announced.
Confirm = Callable[[str, str, Mapping[str, str], datetime], Awaitable[Recheck | None]]


async def _always(action: str, step: str, labels: Mapping[str, str], now: datetime) -> Recheck | None:
    return None


@dataclass(frozen=True)
class Context:
    """``confirm`` is asked right before every disruptive step (re-check, ``remediation/recheck.py``)."""

    kube: Kube
    settings: Settings
    session: aiohttp.ClientSession
    hub: Hub | None
    report: Report
    confirm: Confirm = _always
