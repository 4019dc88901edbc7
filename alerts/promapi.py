"""The one Prometheus HTTP API client: instant and range queries for the report, the remediation what-if, the
re-check before a disruptive step and the allocation lookup; errors as PromError.

Follows the Prometheus HTTP API (https://prometheus.io/docs/prometheus/latest/querying/api/): POST form
``query`` (and ``start``/``end``/``step``) to ``/api/v1/query`` and ``/api/v1/query_range``; the answer is
``{"status": "success", "data": {"resultType": "vector"|"matrix", "result": [...]}}`` or
``{"status": "error", "errorType": ..., "error": ...}`` with a 4xx/5xx status.

Every query is bounded twice: ``timeout`` seconds in all, from the connection to the last series decoded
(urllib's timeout is per socket read, so an answer trickling in never timed out; a deadline on the download
alone let ``report --timeout 20`` run 87.5 s decoding a large answer), and ``max_answer_bytes`` of body
(refused by Content-Length when the server sends one, else while reading), so a Prometheus that answers a
query with millions of series costs at most that much memory (plus what its JSON decodes into: measured
about 5x for Prometheus' vector JSON) and time.

Answers are decoded off the event loop, in a daemon thread per answer, series by series: the envelope
(``status``, ``data``, ``result``) is walked here and each series decoded by ``json.JSONDecoder.raw_decode``
and read strictly, with the deadline checked after each one. So the loop (the remediation controller's, which
also answers webhooks and approvals) is held for at most one series' decoding at a time, a decode past its
deadline stops at the next series, and one that cannot stop at once never holds a CLI's exit (a daemon
thread). Any answer that cannot be read (not JSON, not the API's envelope, a series that is not
``{"metric", "value"|"values"}``) is a ``PromError``, never a partial or empty result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

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
_T = TypeVar("_T")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> int:
    """``"7d"``, ``"36h"``, ``"1h30m"`` -> seconds (argparse type; Prometheus' duration units s m h d w)."""
    parts = re.fullmatch(r"((\d+)([smhdw]))+", text or "")
    if not parts:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 7d, 36h or 90m")
    return sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhdw])", text))


def _clip(detail: str, head: int = 200, tail: int = 300) -> str:
    """A store's error for a log line: its start and its end. VictoriaMetrics writes the whole query
    first (``error when executing query="...": ``) and the reason last (the limit it hit, with the flag
    that sets it), so cutting the end off would lose the reason."""
    if len(detail) <= head + tail + 5:
        return detail
    return f"{detail[:head]} ... {detail[-tail:]}"


class PromError(Exception):
    """Prometheus (or VictoriaMetrics) could not be asked, refused a query, or answered something unusable;
    the message says which, in one line."""


class Unreadable(PromError):
    """Prometheus answered, but what it answered cannot be read: over the size cap, not the API's JSON, or
    a series that is not one (``[null]``). Not a slow or absent Prometheus: something that answers wrongly."""


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

    def _call(self, path: str, params: Mapping[str, str], item: Callable[[Any], Series]) -> list[Series]:
        """One query's series, each result item read by ``item``. Raises PromError."""

        async def one() -> list[Series]:
            async with self._session() as session:
                return await self._acall(session, path, params, item)

        return asyncio.run(one())

    def _session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))

    async def _acall(
        self,
        session: aiohttp.ClientSession,
        path: str,
        params: Mapping[str, str],
        item: Callable[[Any], Series],
    ) -> list[Series]:
        """Ask, download and decode within ``timeout`` in all. Raises PromError."""
        stop = threading.Event()
        deadline = time.monotonic() + self.timeout
        try:
            async with asyncio.timeout(self.timeout):
                status, body = await self._fetch(session, f"{self.url}{path}", params)
                return await _in_thread(self._decode, status, body, item, deadline, stop)
        except TimeoutError:
            stop.set()  # a decode under way stops at its next series
            raise PromError(
                f"Prometheus at {self.url}: no complete answer within {self.timeout:g} s, decoding included "
                f"({self.settings[0]})"
            ) from None
        except aiohttp.ClientError as exc:
            raise PromError(f"cannot reach Prometheus at {self.url}: {exc}") from None
        except OSError as exc:
            raise PromError(f"cannot reach Prometheus at {self.url}: {exc.strerror or exc}") from None

    def _decode(
        self,
        status: int,
        body: bytearray,
        item: Callable[[Any], Series],
        deadline: float,
        stop: threading.Event,
    ) -> list[Series]:
        """In the decoding thread: the series of an answer. Raises PromError, TimeoutError past
        ``deadline`` or once ``stop`` is set."""
        if status >= 400:
            try:
                detail = json.loads(body).get("error", "")
            except (ValueError, AttributeError, RecursionError):
                detail = ""
            raise PromError(f"Prometheus at {self.url} refused a query ({status}): {_clip(str(detail))}")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise Unreadable(f"{self.url} did not answer with Prometheus API JSON (not UTF-8)") from None
        del body

        def check() -> None:
            if stop.is_set() or time.monotonic() > deadline:
                raise TimeoutError

        try:
            doc, series = _Envelope(text, item, check).read()
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            raise Unreadable(f"{self.url} did not answer with Prometheus API JSON") from None
        if doc.get("status") != "success":
            raise PromError(f"Prometheus at {self.url}: {str(doc.get('error') or doc.get('status'))[:200]}")
        if series is None:
            raise Unreadable(f"Prometheus at {self.url}: unexpected answer shape")
        return series

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
        return Unreadable(
            f"Prometheus at {self.url}: an answer over {self.max_answer_bytes / 2**20:g} MiB "
            f"({self.settings[1]}); narrow the selection or raise the limit"
        )

    async def ainstant(self, session: aiohttp.ClientSession, expr: str) -> list[Series]:
        """Instant vector now, on the caller's session (the remediation controller's), bounded in time and
        size like every query. Raises PromError, also for an answer whose series it cannot read."""
        return await self._acall(session, "/api/v1/query", {"query": expr}, _instant)

    def query(self, expr: str, at: float) -> list[Series]:
        """Instant vector at Unix time ``at``."""
        return self._call("/api/v1/query", _params(Request("", expr, at)), _instant)

    def raw(self, selector: str, at: float, window: int) -> list[Series]:
        """Raw samples of ``selector`` in ``(at - window, at]``, per series: an instant query of a range
        selector, answered as a matrix."""
        params = {"query": f"{selector}[{window}s]", "time": f"{at:.3f}"}
        return self._call("/api/v1/query", params, _matrix)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """Range matrix from ``start`` to ``end`` every ``step`` seconds."""
        return self._call("/api/v1/query_range", _params(Request("", expr, end, start, step)), _matrix)

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
                        path, item = (
                            ("/api/v1/query", _instant)
                            if r.start is None
                            else ("/api/v1/query_range", _matrix)
                        )
                        out[r.key] = await self._acall(session, path, _params(r), item)
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


def _instant(r: Any) -> Series:
    """The series of one vector item; PromError unless it is ``{"metric": {...}, "value": [t, "v"]}``
    (``null`` or ``"x"`` is garbage, never a series)."""
    metric, value = _item(r, "value")
    return Series(metric, (_point(value),))


def _matrix(r: Any) -> Series:
    """The series of one matrix item; PromError unless it is ``{"metric": {...}, "values": [...]}``."""
    metric, values = _item(r, "values")
    if not isinstance(values, list):
        raise _shape(r)
    return Series(metric, tuple(_point(v) for v in values))


_SPACE = re.compile(r"[ \t\n\r]*")  # JSON whitespace (RFC 8259 section 2)


class _Envelope:
    """Walks an API answer's two outer levels, ``{..., "data": {..., "result": [item, ...]}}``, decoding
    every other member whole and each result item on its own (``json.JSONDecoder.raw_decode``) into a
    Series through ``item``, calling ``check`` after each (it raises to stop). ``read()`` returns (the
    top-level members but data, the series or None when there is no result). Raises ValueError for text that
    is not such a JSON document (members in any order; the last of a repeated key wins, as in json.loads),
    RecursionError, and what ``item`` and ``check`` raise."""

    def __init__(self, text: str, item: Callable[[Any], Series], check: Callable[[], None]) -> None:
        self.text, self.at = text, 0
        self.item, self.check = item, check
        self.decode = json.JSONDecoder().raw_decode
        self.series: list[Series] | None = None

    def read(self) -> tuple[dict[str, Any], list[Series] | None]:
        top = self._object({"data": ("{", lambda: self._object({"result": ("[", self._result)}))})
        self._space()
        if self.at != len(self.text):
            raise ValueError("data after the answer")
        return top, self.series

    def _space(self) -> None:
        self.at = _SPACE.match(self.text, self.at).end()  # type: ignore[union-attr]

    def _value(self) -> Any:
        self._space()
        value, self.at = self.decode(self.text, self.at)
        return value

    def _next(self) -> str:
        self._space()
        char = self.text[self.at : self.at + 1]
        self.at += 1
        return char

    def _object(self, members: Mapping[str, tuple[str, Callable[[], Any]]]) -> dict[str, Any]:
        """The object here; a member named in ``members`` that opens with its character is read by its
        function (its value in the result is what that returns), any other member decoded whole."""
        if self._next() != "{":
            raise ValueError("not an object")
        out: dict[str, Any] = {}
        self._space()
        if self.text.startswith("}", self.at):
            self.at += 1
            return out
        while True:
            key = self._value()
            if not isinstance(key, str) or self._next() != ":":
                raise ValueError("not an object")
            self._space()
            opening, walk = members.get(key, ("", self._value))
            out[key] = walk() if opening and self.text.startswith(opening, self.at) else self._value()
            char = self._next()
            if char == "}":
                return out
            if char != ",":
                raise ValueError("not an object")

    def _result(self) -> None:
        if self._next() != "[":
            raise ValueError("result is not a list")
        series: list[Series] = []
        self._space()
        if self.text.startswith("]", self.at):
            self.at += 1
        else:
            while True:
                series.append(self.item(self._value()))
                self.check()
                char = self._next()
                if char == "]":
                    break
                if char != ",":
                    raise ValueError("not a list")
        self.series = series


def _in_thread(fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
    """``fn(*args)`` in a new daemon thread: a future of its result or exception on the running loop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # the caller gave up (its deadline passed)
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # handed to the awaiting caller
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="promapi-decode", daemon=True).start()
    return future


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
    except (TypeError, ValueError, OverflowError):  # OverflowError: a 400-digit timestamp
        raise _shape(pair) from None


def _shape(item: Any) -> PromError:
    return Unreadable(f"Prometheus answered a series it cannot read: {json.dumps(item)[:80]}")
