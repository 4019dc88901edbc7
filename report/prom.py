"""Prometheus HTTP API client of the report: instant and range queries, errors as ReportError.

Follows the Prometheus HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/): POST form
``query`` (and ``start``/``end``/``step``) to ``/api/v1/query`` and ``/api/v1/query_range``; the answer is
``{"status": "success", "data": {"resultType": "vector"|"matrix", "result": [...]}}`` or
``{"status": "error", "errorType": ..., "error": ...}`` with a 4xx/5xx status. Standard library only
(urllib): the report is a one-shot command, no event loop needed.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class ReportError(Exception):
    """The report cannot be made: Prometheus unreachable, a query refused, or the data it needs absent."""


@dataclass(frozen=True)
class Series:
    labels: Mapping[str, str]
    values: tuple[tuple[float, float], ...]  # (Unix seconds, value); one pair for an instant vector


class Prometheus:
    def __init__(self, url: str, timeout: float = 60.0) -> None:
        """Raises ReportError when ``url`` is not an http(s) URL."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ReportError(f"{url!r} is not a Prometheus URL like http://prometheus:9090")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, path: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        body = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=body, method="POST")
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                payload = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                detail = json.loads(exc.read()).get("error", "")
            except ValueError:
                detail = ""
            raise ReportError(f"Prometheus at {self.url} refused a query ({exc.code}): {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ReportError(f"cannot reach Prometheus at {self.url}: {reason}") from None
        except ValueError:
            raise ReportError(f"{self.url} did not answer with Prometheus API JSON") from None
        if not isinstance(payload, dict) or payload.get("status") != "success":
            raise ReportError(
                f"Prometheus at {self.url}: {payload.get('error') if isinstance(payload, dict) else payload}"
            )
        result = payload.get("data", {}).get("result")
        if not isinstance(result, list):
            raise ReportError(f"Prometheus at {self.url}: unexpected answer shape")
        return result

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
