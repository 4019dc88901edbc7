"""The one Prometheus HTTP API client: instant and range queries for the report, the remediation what-if, the
re-check before a disruptive step and the allocation lookup; errors as PromError.

Follows the Prometheus HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/): POST form
``query`` (and ``start``/``end``/``step``) to ``/api/v1/query`` and ``/api/v1/query_range``; the answer is
``{"status": "success", "data": {"resultType": "vector"|"matrix", "result": [...]}}`` or
``{"status": "error", "errorType": ..., "error": ...}`` with a 4xx/5xx status.

Every query is bounded twice: ``timeout`` seconds in all, connection to the last byte of the answer
(aiohttp's ``ClientTimeout(total=...)``; urllib's timeout is per socket read, so an answer trickling in never
timed out), and ``max_answer_bytes`` of body (refused by Content-Length when the server sends one, else
while reading), so a Prometheus that answers a query with millions of series costs at most that much memory
(plus what its JSON decodes into: measured about 5x for Prometheus' vector JSON) and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

DEFAULT_TIMEOUT_SECONDS = 120.0
DEFAULT_MAX_ANSWER_BYTES = 64 * 2**20
"""64 MiB: the largest answer the report's queries give is a per-device instant vector, about 300 bytes a
device (3 MiB for 10,000 devices), so 20x headroom; a 3-million-series answer (~1 GiB) is refused."""
DEFAULT_CONCURRENCY = 4
"""Queries in flight at once: Prometheus evaluates each query on one core, so a few at a time use a
multi-core server's cores; more would only queue there and hold more answers in memory here."""
_ERROR_BODY_BYTES = 65536
_CHUNK = 65536
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> int:
    """``"7d"``, ``"36h"``, ``"1h30m"`` -> seconds (argparse type; Prometheus' duration units s m h d w)."""
    parts = re.fullmatch(r"((\d+)([smhdw]))+", text or "")
    if not parts:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 7d, 36h or 90m")
    return sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhdw])", text))


class PromError(Exception):
    """Prometheus (or VictoriaMetrics) could not be asked, refused a query, or answered something unusable;
    the message says which, in one line."""


@dataclass(frozen=True)
class Series:
    labels: Mapping[str, str]
    values: tuple[tuple[float, float], ...]  # (Unix seconds, value); one pair for an instant vector


class Prometheus:
    def __init__(
        self,
        url: str,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        settings: tuple[str, str] = ("--timeout", "--max-answer-mib"),
    ) -> None:
        """``timeout``: seconds per query, the whole answer included; ``max_answer_bytes``: largest answer
        body read; ``settings``: what the user sets them with, named in the errors (the report's and the
        what-if's flags by default). Raises PromError when ``url`` is not an http(s) URL."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise PromError(f"{url!r} is not a Prometheus URL like http://prometheus:9090")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_answer_bytes = max_answer_bytes
        self.settings = settings

    def _call(self, path: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        """One query's ``data.result``. Raises PromError."""

        async def one() -> list[dict[str, Any]]:
            async with self._session() as session:
                return await self._acall(session, path, params)

        return asyncio.run(one())

    def _session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))

    async def _acall(
        self, session: aiohttp.ClientSession, path: str, params: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        try:
            status, body = await self._fetch(session, f"{self.url}{path}", params)
        except TimeoutError:
            raise PromError(
                f"Prometheus at {self.url}: no complete answer within {self.timeout:g} s ({self.settings[0]})"
            ) from None
        except aiohttp.ClientError as exc:
            raise PromError(f"cannot reach Prometheus at {self.url}: {exc}") from None
        except OSError as exc:
            raise PromError(f"cannot reach Prometheus at {self.url}: {exc.strerror or exc}") from None
        return self._result(status, body)

    def _result(self, status: int, body: bytearray) -> list[dict[str, Any]]:
        if status >= 400:
            try:
                detail = json.loads(body).get("error", "")
            except (ValueError, AttributeError):
                detail = ""
            raise PromError(f"Prometheus at {self.url} refused a query ({status}): {detail}")
        try:
            payload = json.loads(body)
        except ValueError:
            raise PromError(f"{self.url} did not answer with Prometheus API JSON") from None
        del body
        if not isinstance(payload, dict) or payload.get("status") != "success":
            raise PromError(
                f"Prometheus at {self.url}: {payload.get('error') if isinstance(payload, dict) else payload}"
            )
        data = payload.get("data")
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            raise PromError(f"Prometheus at {self.url}: unexpected answer shape")
        return result

    async def _fetch(
        self, session: aiohttp.ClientSession, url: str, params: Mapping[str, str]
    ) -> tuple[int, bytearray]:
        """(status, body) of one POST, within ``timeout`` in all and ``max_answer_bytes`` of body (an error
        answer: at most 64 KiB of it). Raises TimeoutError, aiohttp.ClientError, OSError, PromError."""
        # ClientTimeout(total=timeout) bounds each request on its own, queueing for a connection included
        limit = aiohttp.ClientTimeout(total=self.timeout)
        async with session.post(url, data=dict(params), timeout=limit) as resp:
            cap = self.max_answer_bytes if resp.status < 400 else _ERROR_BODY_BYTES
            if resp.status < 400 and (resp.content_length or 0) > cap:
                raise self._too_large()
            body = bytearray()
            while chunk := await resp.content.read(_CHUNK):
                if len(body) + len(chunk) > cap:
                    if resp.status >= 400:
                        break  # the start of an error text is enough to name it
                    del body
                    raise self._too_large()
                body += chunk
            return resp.status, body

    def _too_large(self) -> PromError:
        return PromError(
            f"Prometheus at {self.url}: an answer over {self.max_answer_bytes / 2**20:g} MiB "
            f"({self.settings[1]}); narrow the selection or raise the limit"
        )

    async def ainstant(self, session: aiohttp.ClientSession, expr: str) -> list[Series]:
        """Instant vector now, on the caller's session (the remediation controller's), bounded in time and
        size like every query. Raises PromError, also for an answer whose series it cannot read."""
        return _instant(await self._acall(session, "/api/v1/query", {"query": expr}))

    def query(self, expr: str, at: float) -> list[Series]:
        """Instant vector at Unix time ``at``."""
        return _instant(self._call("/api/v1/query", _params(Request("", expr, at))))

    def raw(self, selector: str, at: float, window: int) -> list[Series]:
        """Raw samples of ``selector`` in ``(at - window, at]``, per series: an instant query of a range
        selector, answered as a matrix."""
        return _matrix(self._call("/api/v1/query", {"query": f"{selector}[{window}s]", "time": f"{at:.3f}"}))

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """Range matrix from ``start`` to ``end`` every ``step`` seconds."""
        return _matrix(self._call("/api/v1/query_range", _params(Request("", expr, end, start, step))))

    def gather(
        self,
        requests: Sequence[Request],
        concurrency: int = DEFAULT_CONCURRENCY,
        done: Callable[[Request], None] = lambda _: None,
    ) -> dict[str, list[Series]]:
        """Answers of ``requests`` by key, at most ``concurrency`` queries in flight on one connection pool;
        ``done(request)`` is called as each answer arrives (in the order they arrive). Each query keeps its own
        ``timeout`` and ``max_answer_bytes`` (so up to ``concurrency`` answers in memory at once). Raises
        PromError on the first query that fails; the others are cancelled."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")

        async def run() -> dict[str, list[Series]]:
            gate = asyncio.Semaphore(concurrency)
            out: dict[str, list[Series]] = {}
            async with self._session() as session:

                async def one(r: Request) -> None:
                    async with gate:
                        path = "/api/v1/query" if r.start is None else "/api/v1/query_range"
                        result = await self._acall(session, path, _params(r))
                    out[r.key] = _instant(result) if r.start is None else _matrix(result)
                    done(r)

                async with asyncio.TaskGroup() as tasks:
                    for r in requests:
                        tasks.create_task(one(r))
            return out

        try:
            return asyncio.run(run())
        except* PromError as group:
            raise group.exceptions[0] from None


@dataclass(frozen=True)
class Request:
    """One query of a :meth:`Prometheus.gather`: an instant query of ``expr`` at ``time`` (Unix seconds), or,
    with ``start`` and ``step``, a range query from ``start`` to ``time`` every ``step`` seconds."""

    key: str
    expr: str
    time: float
    start: float | None = None
    step: float | None = None
    title: str = ""  # what a progress bar says while it runs


def _params(r: Request) -> dict[str, str]:
    if r.start is None:
        return {"query": r.expr, "time": f"{r.time:.3f}"}
    return {"query": r.expr, "start": f"{r.start:.3f}", "end": f"{r.time:.3f}", "step": f"{r.step:g}"}


def _instant(result: list[Any]) -> list[Series]:
    """Series of a vector answer; PromError on any item that is not ``{"metric": {...}, "value": [t, "v"]}``
    (``[null]`` or ``["x"]`` is garbage, never a series)."""
    out = []
    for r in result:
        metric, value = _item(r, "value")
        out.append(Series(metric, (_point(value),)))
    return out


def _matrix(result: list[Any]) -> list[Series]:
    """Series of a matrix answer; PromError on any item that is not ``{"metric": {...}, "values": [...]}``."""
    out = []
    for r in result:
        metric, values = _item(r, "values")
        if not isinstance(values, list):
            raise _shape(r)
        out.append(Series(metric, tuple(_point(v) for v in values)))
    return out


def _item(r: Any, key: str) -> tuple[Mapping[str, str], Any]:
    if not isinstance(r, dict) or key not in r:
        raise _shape(r)
    metric = r.get("metric", {})
    if not isinstance(metric, dict) or not all(isinstance(v, str) for v in metric.values()):
        raise _shape(r)
    return metric, r[key]


def _point(pair: Any) -> tuple[float, float]:
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        raise _shape(pair)
    try:
        return float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        raise _shape(pair) from None


def _shape(item: Any) -> PromError:
    return PromError(f"Prometheus answered a series it cannot read: {json.dumps(item)[:80]}")
