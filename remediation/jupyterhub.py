"""Notebook activity and stop over HTTP: the JupyterHub REST API and the Jupyter server ``/api/kernels``.

Hub calls as jupyterhub-idle-culler makes them (README, ``jupyterhub_idle_culler/__init__.py``): header
``Authorization: token <token>``; ``GET /users/{name}`` (scopes ``read:users:activity``, ``read:servers``)
returns ``servers: {name: {ready, pending, last_activity, started}}``; ``DELETE /users/{name}/server``
(default server) or ``/users/{name}/servers/{server}`` (scope ``delete:servers``) answers 204 when
stopped, 202 when the stop is still in progress. Kernels (Kubeflow culler, ``culler.go``): a list of
``{id, name, last_activity, execution_state, connections}``; any kernel not ``idle`` means active now.
Every failure is a ``ProbeError``: a failed probe means "do not act".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import aiohttp

from .alert import PayloadError, parse_time


class ProbeError(Exception):
    """The Hub or the notebook could not be asked, or answered something unusable."""


class BusyKernel(Exception):
    """A kernel is executing: the notebook is active now."""


@dataclass(frozen=True)
class ServerActivity:
    """One server's state: ``running`` (ready and not pending), ``last_activity`` (UTC; None = never)."""

    running: bool
    pending: str | None
    last_activity: datetime | None


class Hub:
    """JupyterHub REST client. ``api_url`` e.g. ``http://127.0.0.1:8081/hub/api``."""

    def __init__(
        self, session: aiohttp.ClientSession, api_url: str, token: str, timeout: float = 10.0
    ) -> None:
        self.session = session
        self.api_url = api_url.rstrip("/")
        self.headers = {"Authorization": f"token {token}"}
        self.timeout = aiohttp.ClientTimeout(total=timeout)

    async def _request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        try:
            async with self.session.request(
                method, self.api_url + path, headers=self.headers, timeout=self.timeout, **kwargs
            ) as resp:
                body = await resp.read()
                doc = None
                if body and resp.content_type == "application/json":
                    try:
                        doc = await resp.json()
                    except ValueError:
                        doc = None
                return resp.status, doc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ProbeError(f"hub unreachable: {exc.__class__.__name__}: {exc}") from None

    async def server_activity(self, user: str, server: str = "") -> ServerActivity | None:
        """Activity of ``user``'s ``server`` ("" = default); None when the server does not exist."""
        status, doc = await self._request("GET", f"/users/{quote(user, safe='')}")
        if status == 404:
            return None
        if status != 200 or not isinstance(doc, dict):
            raise ProbeError(f"hub answered {status} for user {user}")
        servers = doc.get("servers")
        if not isinstance(servers, dict):
            raise ProbeError("hub answer lacks servers (token needs read:servers)")
        s = servers.get(server)
        if s is None:
            return None
        if not isinstance(s, dict) or "last_activity" not in s:
            raise ProbeError("hub answer lacks last_activity (token needs read:users:activity)")
        try:
            last = parse_time(s["last_activity"], "last_activity") if s.get("last_activity") else None
        except PayloadError as exc:
            raise ProbeError(str(exc)) from None
        return ServerActivity(bool(s.get("ready")) and not s.get("pending"), s.get("pending"), last)

    async def stop_server(self, user: str, server: str = "") -> bool:
        """Stop a server; True when stopped (204), False when stopping (202). Other answers: ProbeError."""
        u = quote(user, safe="")
        path = f"/users/{u}/server" if not server else f"/users/{u}/servers/{quote(server, safe='')}"
        status, _ = await self._request("DELETE", path)
        if status in (202, 204):
            return status == 204
        raise ProbeError(f"hub answered {status} to stopping {user}/{server}")


async def kernels_activity(
    session: aiohttp.ClientSession, url: str, token: str | None, timeout: float
) -> datetime | None:
    """Latest kernel ``last_activity`` from a Jupyter server's ``/api/kernels``. Raises ``BusyKernel`` if a
    kernel is not idle (active now) and ``ProbeError`` for transport errors, non-200 answers and zero
    kernels (the Kubeflow culler leaves last-activity alone on those, so do we)."""
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                raise ProbeError(f"kernels probe answered {resp.status}")
            doc = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ProbeError(f"kernels probe failed: {exc.__class__.__name__}: {exc}") from None
    if not isinstance(doc, list) or not doc:
        raise ProbeError("kernels probe returned no kernels")
    latest: datetime | None = None
    for k in doc:
        if not isinstance(k, dict):
            raise ProbeError("kernels probe returned a non-object")
        if k.get("execution_state") != "idle":
            raise BusyKernel()
        try:
            t = parse_time(k.get("last_activity"), "last_activity")
        except PayloadError as exc:
            raise ProbeError(str(exc)) from None
        latest = t if latest is None or t > latest else latest
    return latest
