"""Prometheus HTTP API client of the report: instant and range queries, errors as ReportError.

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

import asyncio
import json
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


class ReportError(Exception):
    """The report cannot be made: Prometheus unreachable, a query refused, or the data it needs absent."""


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
    ) -> None:
        """``timeout``: seconds per query, the whole answer included; ``max_answer_bytes``: largest answer
        body read. Raises ReportError when ``url`` is not an http(s) URL."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ReportError(f"{url!r} is not a Prometheus URL like http://prometheus:9090")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_answer_bytes = max_answer_bytes

    def _call(self, path: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        """One query's ``data.result``. Raises ReportError."""

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
            raise ReportError(
                f"Prometheus at {self.url}: no complete answer within {self.timeout:g} s (--timeout)"
            ) from None
        except aiohttp.ClientError as exc:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {exc}") from None
        except OSError as exc:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {exc.strerror or exc}") from None
        return self._result(status, body)

    def _result(self, status: int, body: bytearray) -> list[dict[str, Any]]:
        if status >= 400:
            try:
                detail = json.loads(body).get("error", "")
            except (ValueError, AttributeError):
                detail = ""
            raise ReportError(f"Prometheus at {self.url} refused a query ({status}): {detail}")
        try:
            payload = json.loads(body)
        except ValueError:
            raise ReportError(f"{self.url} did not answer with Prometheus API JSON") from None
        del body
        if not isinstance(payload, dict) or payload.get("status") != "success":
            raise ReportError(
                f"Prometheus at {self.url}: {payload.get('error') if isinstance(payload, dict) else payload}"
            )
        data = payload.get("data")
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            raise ReportError(f"Prometheus at {self.url}: unexpected answer shape")
        return result

    async def _fetch(
        self, session: aiohttp.ClientSession, url: str, params: Mapping[str, str]
    ) -> tuple[int, bytearray]:
        """(status, body) of one POST, within ``timeout`` in all and ``max_answer_bytes`` of body (an error
        answer: at most 64 KiB of it). Raises TimeoutError, aiohttp.ClientError, OSError, ReportError."""
        # the session's ClientTimeout(total=timeout) bounds each request on its own, queueing included
        async with session.post(url, data=dict(params)) as resp:
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

    def _too_large(self) -> ReportError:
        return ReportError(
            f"Prometheus at {self.url}: an answer over {self.max_answer_bytes / 2**20:g} MiB "
            f"(--max-answer-mib); narrow the selection or raise the limit"
        )

    def query(self, expr: str, at: float) -> list[Series]:
        """Instant vector at Unix time ``at``."""
        return _instant(self._call("/api/v1/query", _params(Request("", expr, at))))

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
        ReportError on the first query that fails; the others are cancelled."""
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
        except* ReportError as group:
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


def _instant(result: list[dict[str, Any]]) -> list[Series]:
    out = []
    for r in result:
        if "value" in r:
            t, v = r["value"]
            out.append(Series(r.get("metric", {}), ((float(t), float(v)),)))
    return out


def _matrix(result: list[dict[str, Any]]) -> list[Series]:
    return [
        Series(r.get("metric", {}), tuple((float(t), float(v)) for t, v in r.get("values", [])))
        for r in result
    ]
