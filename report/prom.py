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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

DEFAULT_TIMEOUT_SECONDS = 120.0
DEFAULT_MAX_ANSWER_BYTES = 64 * 2**20
"""64 MiB: the largest answer the report's queries give is a per-device instant vector, about 300 bytes a
device (3 MiB for 10,000 devices), so 20x headroom; a 3-million-series answer (~1 GiB) is refused."""
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
        try:
            status, body = asyncio.run(self._fetch(f"{self.url}{path}", params))
        except TimeoutError:
            raise ReportError(
                f"Prometheus at {self.url}: no complete answer within {self.timeout:g} s (--timeout)"
            ) from None
        except aiohttp.ClientError as exc:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {exc}") from None
        except OSError as exc:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {exc.strerror or exc}") from None
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

    async def _fetch(self, url: str, params: Mapping[str, str]) -> tuple[int, bytearray]:
        """(status, body) of one POST, within ``timeout`` in all and ``max_answer_bytes`` of body (an error
        answer: at most 64 KiB of it). Raises TimeoutError, aiohttp.ClientError, OSError, ReportError."""
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(url, data=dict(params)) as resp,
        ):
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
        out = []
        for r in self._call("/api/v1/query", {"query": expr, "time": f"{at:.3f}"}):
            if "value" in r:
                t, v = r["value"]
                out.append(Series(r.get("metric", {}), ((float(t), float(v)),)))
        return out

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """Range matrix from ``start`` to ``end`` every ``step`` seconds."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return [
            Series(r.get("metric", {}), tuple((float(t), float(v)) for t, v in r.get("values", [])))
            for r in self._call("/api/v1/query_range", params)
        ]
