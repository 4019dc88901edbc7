"""Actions: one module per remediation (reclaim, resize, drain); each step is an async function of a
``Context``, a ``Decision`` or persisted ``Progress``, and the injected clock, returning an ``Outcome``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import aiohttp

from ..jupyterhub import Hub
from ..kube import Kube, ObjectRef
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


@dataclass(frozen=True)
class Context:
    kube: Kube
    settings: Settings
    session: aiohttp.ClientSession
    hub: Hub | None
    report: Report
