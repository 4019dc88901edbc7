"""Exposition cache: renders /metrics once per new poller state and serves the same bytes until it changes.

A scrape computes the collector's ``render_key()`` (cheap: one tuple per backend plus the attribution) and,
when it equals the cached body's key, gets the stored body without taking a lock (``peek``). After each poll
the poller calls ``warm()``, which re-renders only the variants (format x gzip) that scrapers asked for
within ``WARM_SECONDS``: nothing is rendered before the first scrape, and a variant nobody scrapes any more
stops costing CPU. Of those, ``warm()`` renders a variant only when its next scrape is due before the next
poll lands (``ScrapeForecast``): with 5 s polls and Prometheus' 15 s scrapes that is one render per scrape,
not three.

Never stale beyond one poll, never waiting for a render: a scrape that lands after a poll made new samples
visible but before its body is rendered (while ``warm()`` runs, or earlier than forecast, or after a change
between polls such as pod attribution) is served the previous body, which holds the state of the poll
before, and the server starts a render of the new state in the background (``Cached.behind``). A body whose
state is two or more polls old (``Collector.polls()``) is never served: then, and for the first scrape of a
variant, the scrape waits for a render (off the event loop).

Rendering: prometheus-client's encoders (text 0.0.4 or OpenMetrics, chosen by ``choose_encoder`` from the
Accept header) over the collector's families (``exporter.collector.families``) are the reference.
``FastEncoder`` writes the same bytes (proved by tests/exporter/test_exposition.py with hypothesis over
random fleets, and by the golden files) without building the collector's families: its
``SeriesWriter`` writes each series as ``name{labels} value`` straight from the samples, remembering each
device's rendered prefixes (and each family's HELP/TYPE/UNIT lines) across polls, so a poll costs a
dictionary lookup, a float format and a concatenation per series instead of building label dicts and
Sample objects and escaping every label name and value again. The few other families (build info,
process, python) go through ``FastEncoder.encode``, which caches prefixes the same way; anything it does
not handle (timestamps, exemplars, histograms, native histograms, other escapings of metric names) is
handed to the reference encoder family by family.

With ``standard=True`` the body also carries ``xpuwatch_build_info`` and the ``process_*`` / ``python_*``
families (exporter.build), read at each render: as of the latest poll, never older than one poll interval
while a backend runs.
"""

from __future__ import annotations

import copy
import gc
import gzip
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import exposition as _text
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as _om
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString
from prometheus_client.validation import _is_valid_legacy_metric_name

from xpuwatch.exporter.build import register_standard
from xpuwatch.exporter.collector import Collector, SeriesWriter, family

GZIP_LEVEL = 1
"""Measured on the 512-device body (3.4 MiB; benchmarks/exporter_scrape.py): level 1 takes 15 ms of CPU and
gives 288 KiB, level 6 takes 37 ms for 250 KiB (level 3: 16 ms, 288 KiB). The body is compressed once per
poll and served from memory, so the CPU saved per poll outweighs 15 % more bytes on loopback/LAN scrapes."""
WARM_SECONDS = 300.0
"""A variant is re-rendered after each poll while it was asked for within this long (covers scrape
intervals up to 5 minutes); after that it is rendered again only when asked."""

FORECAST_SLACK_SECONDS = 1.0
"""``warm()`` also renders a variant whose next scrape is forecast up to this long after the next poll
lands: that poll itself takes time (the tool call, then the render), and scrapers jitter."""
FORECAST_GAPS = 4
"""A variant's scrape interval is forecast as the shortest of its last this-many gaps between scrapes
(two Prometheus replicas scraping one exporter out of phase give alternating gaps: the shorter wins)."""
FORECAST_MIN_GAP_SECONDS = 0.25
"""Shorter gaps are not a scrape interval (a server's peek-then-get of one scrape, a client's retry) and
are left out of the forecast."""

Variant = tuple[str, bool]  # (content type, gzipped)


class ScrapeForecast:
    """When each variant will next be scraped, from when it was scraped before. Pure: times are passed in.

    ``asked(variant, t)`` records a scrape at monotonic time ``t``. ``due(variant, now, within)`` is True
    when the variant's next scrape is forecast within ``within + FORECAST_SLACK_SECONDS`` seconds of
    ``now`` (or is overdue), and also whenever there is no forecast yet (fewer than two scrapes): then
    rendering ahead is the safe choice.
    """

    def __init__(self) -> None:
        self._last: dict[Variant, float] = {}
        self._gaps: dict[Variant, list[float]] = {}

    def asked(self, variant: Variant, t: float) -> None:
        last = self._last.get(variant)
        self._last[variant] = t
        if last is not None and t - last >= FORECAST_MIN_GAP_SECONDS:
            gaps = self._gaps.setdefault(variant, [])
            gaps.append(t - last)
            del gaps[:-FORECAST_GAPS]

    def interval(self, variant: Variant) -> float | None:
        """The forecast scrape interval in seconds, or None before the second scrape."""
        gaps = self._gaps.get(variant)
        return min(gaps) if gaps else None

    def due(self, variant: Variant, now: float, within: float) -> bool:
        interval = self.interval(variant)
        if interval is None:
            return True
        return self._last[variant] + interval - now <= within + FORECAST_SLACK_SECONDS


log = logging.getLogger(__name__)
_FAST_TYPES = frozenset({"gauge", "counter", "info", "unknown", "stateset"})
_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate (a JSON ``"\\ud800"`` escape in a pod annotation): a str, but not UTF-8 text."""


def _text_only(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text)


_TEXT_TYPES = {"info": "gauge", "stateset": "gauge", "unknown": "untyped"}
_TEXT_SUFFIX = {"counter": "_total", "info": "_info"}


class FastEncoder:
    """prometheus-client's text (``openmetrics=False``) or OpenMetrics encoder with the given ``escaping``,
    producing identical bytes, with per-series prefixes kept between calls (see the module docstring).

    ``reference`` is the prometheus-client encoder it stands for (a callable taking a registry). The prefix
    cache holds only the series of the last render (memory stays flat as series come and go).
    """

    def __init__(self, openmetrics: bool, escaping: str, reference: Callable[[Any], bytes]) -> None:
        self.openmetrics = openmetrics
        self.escaping = escaping
        self.reference = reference
        self._prefixes: dict[tuple[str, ...], str] = {}
        self._headers: dict[tuple[str, str, str, str], str] = {}
        self._writer: SeriesWriter | None = None
        self._family_headers: list[str] = []
        self._warned = False

    def __call__(self, registry: Any) -> bytes:
        return self.encode(registry.collect())

    def render(self, collector: Collector, rest: Iterable[Metric] = ()) -> bytes:
        """The bytes the reference writes for a registry holding ``collector`` and then the families
        ``rest``: the collector's series are written straight from ``collector.inputs()`` by a
        ``SeriesWriter`` (prefixes rendered by this encoder and kept per device), without building its
        families; ``rest`` goes through ``encode``."""
        writer = self._writer
        if (
            writer is None
            or writer.catalog is not collector.catalog
            or writer.selection is not collector.selection
        ):
            writer = self._writer = SeriesWriter(collector.catalog, self._prefix, collector.selection)
            self._family_headers = [self._header(family(name, d)) for name, d in writer.defs.items()]
        unknown: set[str] = set()
        lines = writer.write(collector.inputs(), unknown)
        collector.warn_unknown(unknown)
        head: list[str] = []
        for header, family_lines in zip(self._family_headers, lines, strict=True):
            if family_lines:
                head.append(header)
                head += family_lines
        return self.encode(rest, head)

    def encode(self, families: Iterable[Metric], head: list[str] | None = None) -> bytes:
        """The body of ``families``, after the already rendered lines ``head`` if given."""
        out: list[str] = head if head is not None else []
        old, new = self._prefixes, {}
        values: dict[float, str] = {}
        headers: dict[tuple[str, str, str, str], str] = {}
        for metric in families:
            key = (metric.name, metric.type, metric.unit, metric.documentation)
            header = self._headers.get(key) or self._header(metric)
            headers[key] = header
            if metric.type not in _FAST_TYPES:
                out.append(self._reference_family(metric))
                continue
            mark = len(out)
            out.append(header)
            special = {metric.name + "_created", metric.name + "_gsum", metric.name + "_gcount"}
            for s in metric.samples:
                if (
                    s.timestamp is not None
                    or s.exemplar is not None
                    or s.native_histogram is not None
                    or s.name in special
                ):
                    del out[mark:]  # a sample only the reference knows how to write: whole family to it
                    out.append(self._reference_family(metric))
                    break
                # One flat tuple of strings per series (1 + 2k items, so unambiguous): GC untracks it.
                skey = (s.name, *s.labels, *s.labels.values())
                prefix = old.get(skey)
                if prefix is None:
                    prefix = self._prefix(s.name, s.labels)
                new[skey] = prefix
                v = s.value
                if v is None:
                    out.append(prefix + "\n")
                    continue
                text = values.get(v) if v != 0 else None
                if text is None:
                    text = floatToGoString(v)
                    if v != 0:  # 0.0 and -0.0 are equal keys but print differently
                        values[v] = text
                out.append(prefix + text + "\n")
        self._prefixes, self._headers = new, headers
        if self.openmetrics:
            out.append("# EOF\n")
        text = "".join(out)
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in a label value: U+FFFD, never a failed scrape
            self._replaced()
            return _text_only(text).encode("utf-8")

    def _replaced(self) -> None:
        if self._warned:  # once per format: the same annotation is met at every render
            return
        self._warned = True
        log.warning(
            "a label value held a lone surrogate (not UTF-8 text; a pod annotation or label from the "
            "Kubernetes API or kubelet?): written as U+FFFD"
        )

    def _reference_family(self, metric: Metric) -> str:
        try:
            body = self.reference(_One(metric)).decode("utf-8")
        except UnicodeEncodeError:  # as in encode(): the family again, its label values made text
            self._replaced()
            clean = copy.copy(metric)
            clean.samples = [
                s._replace(labels={k: _text_only(v) for k, v in s.labels.items()}) for s in metric.samples
            ]
            body = self.reference(_One(clean)).decode("utf-8")
        return body[: -len("# EOF\n")] if self.openmetrics else body

    def _header(self, metric: Metric) -> str:
        esc = self.escaping
        if self.openmetrics:
            name = _om.escape_metric_name(metric.name, esc)
            doc = _om._escape(metric.documentation, _om.ALLOWUTF8, _om._is_legacy_labelname_rune)
            text = f"# HELP {name} {doc}\n# TYPE {name} {metric.type}\n"
            if metric.unit:
                text += f"# UNIT {name} {metric.unit}\n"
            return text
        mname = metric.name + _TEXT_SUFFIX.get(metric.type, "")
        mtype = _TEXT_TYPES.get(metric.type, metric.type)
        name = _om.escape_metric_name(mname, esc)
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n"

    def _prefix(self, name: str, labels: Mapping[str, str]) -> str:
        """``name{labels} `` exactly as the reference writes it before the value."""
        esc = self.escaping
        allow = _om.ALLOWUTF8
        legacy = _is_valid_legacy_metric_name(name)
        if self.openmetrics:
            labelstr = ""
            if esc == allow and not legacy:
                labelstr = _om.escape_metric_name(name, esc) + ("," if labels else "")
            if labels:
                labelstr += ",".join(
                    f'{_om.escape_label_name(k, esc)}="{_om._escape(v, allow, _om._is_legacy_labelname_rune)}"'
                    for k, v in sorted(labels.items())
                )
            if labelstr:
                labelstr = "{" + labelstr + "}"
            if esc != allow or legacy:
                return f"{_om._escape(name, esc, _om._is_legacy_labelname_rune)}{labelstr} "
            return f"{labelstr} "
        labelstr = ",".join(
            f'{_om.escape_label_name(k, esc)}="{_om._escape(v, allow, False)}"'  # type: ignore[arg-type]
            for k, v in sorted(labels.items())
        )
        if esc != allow or legacy:
            return f"{_om.escape_metric_name(name, esc)}{'{' + labelstr + '}' if labelstr else ''} "
        comma = "," if labelstr else ""
        return f"{{{_om.escape_metric_name(name, esc)}{comma}{labelstr}}} "


class _One:
    """A registry-like object yielding one family (for the reference encoder)."""

    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterable[Metric]:
        return [self._metric]


def fast_encoder(reference: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """The FastEncoder standing for a prometheus-client encoder returned by ``choose_encoder``; any other
    callable is returned as it is."""
    func = getattr(reference, "func", reference)
    kw = getattr(reference, "keywords", {}) or {}
    escaping = kw.get("escaping", _om.UNDERSCORES)
    if func is _om.generate_latest:
        return FastEncoder(True, escaping, reference)
    if func is _text.generate_latest:
        return FastEncoder(False, escaping, reference)
    return reference


@dataclass(frozen=True)
class Rendered:
    """One response body: ``body`` is gzip-compressed when ``gzipped``."""

    body: bytes
    content_type: str
    gzipped: bool


@dataclass(frozen=True)
class Cached:
    """What ``peek`` found: ``rendered`` is served as it is. ``behind`` is True when it is the body of a
    previous state (at most one poll old): the caller serves it and starts a render of the current state
    (``get``) without waiting for it."""

    rendered: Rendered
    behind: bool


class ExpositionCache:
    """Caches rendered bodies per variant (content type, gzip), each with the state it was rendered from.

    ``registry`` holds the collector and then (``standard``) the standard families: the reference body is
    prometheus-client's encoder over it. A FastEncoder renders the same body from ``collector.inputs()``
    and the standard families' own ``collect()``.

    Staleness bound: a body is served while it holds the state of the latest completed poll or of the one
    before (``Collector.polls()``), never older; a scrape waits for a render only when no such body exists
    (the first scrape of a variant, or one that was not rendered for two polls)."""

    def __init__(
        self, collector: Collector, standard: bool = False, update_period: float | None = None
    ) -> None:
        """``update_period``: seconds between polls (the shortest backend interval), which ``warm()`` uses
        to skip renders no scrape will read before the next poll; None renders every warm variant."""
        self.collector = collector
        self.update_period = update_period
        self.forecast = ScrapeForecast()
        self.standard = CollectorRegistry(auto_describe=False)
        if standard:
            register_standard(self.standard)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.registry.register(self.standard)
        self._lock = threading.Lock()
        # variant -> (render key, polls read before rendering, body); the dict is replaced whole under the
        # lock, never changed in place, so that peek() needs no lock.
        self._bodies: dict[Variant, tuple[object, int, Rendered]] = {}
        self._encoders: dict[str, Callable[[Any], bytes]] = {}  # content type -> encoder (one per format)
        self._asked: dict[Variant, float] = {}  # variant -> monotonic time it was last asked for
        self._variants: set[Variant] = set()  # variants kept warm
        self.renders = 0  # how many times families were rendered (tests, benchmark)
        self.clock: Callable[[], float] = time.monotonic

    def peek(self, accept: str, accept_encoding: str) -> Cached | None:
        """The body to serve for these headers without rendering: the body of the current state, or (then
        ``behind``) the body of a previous state at most one poll old; None when neither exists."""
        _, content_type = choose_encoder(accept)
        variant = (content_type, gzip_accepted(accept_encoding))
        now = self._asked[variant] = self.clock()
        self.forecast.asked(variant, now)
        entry = self._bodies.get(variant)
        if entry is None:
            return None
        key, polls, rendered = entry
        if key == self.collector.render_key():
            return Cached(rendered, False)
        if polls >= self.collector.polls() - 1:
            return Cached(rendered, True)
        return None

    def get(self, accept: str, accept_encoding: str) -> Rendered:
        """The body of the current state for these request headers, rendering it if not cached."""
        encoder, content_type = choose_encoder(accept)
        variant = (content_type, gzip_accepted(accept_encoding))
        now = self._asked[variant] = self.clock()
        self.forecast.asked(variant, now)  # after peek() for the same scrape: a gap under MIN_GAP, ignored
        with self._lock:
            if content_type not in self._encoders:
                self._encoders[content_type] = fast_encoder(encoder)
            self._variants.add(variant)
            polls = self.collector.polls()  # read first: the body holds this poll's state or a newer one
            key = self.collector.render_key()
            entry = self._bodies.get(variant)
            if entry is not None and entry[0] == key:
                return entry[2]
            bodies = self._servable(polls)
            hit = self._render(variant, key, polls, bodies)
            self._bodies = bodies
            return hit

    def _servable(self, polls: int) -> dict[Variant, tuple[object, int, Rendered]]:
        """A copy of the cached bodies less those two or more polls older than ``polls`` (never served)."""
        return {v: e for v, e in self._bodies.items() if e[1] >= polls - 1}

    def _render(
        self,
        variant: Variant,
        key: object,
        polls: int,
        bodies: dict[Variant, tuple[object, int, Rendered]],
    ) -> Rendered:
        """Render one variant of state ``key`` into ``bodies`` (reusing the plain body of the same format
        and state if present)."""
        content_type, gz = variant
        plain_entry = bodies.get((content_type, False))
        if plain_entry is not None and plain_entry[0] == key:
            plain = plain_entry[2]
        else:
            self.renders += 1
            # No cyclic GC during a render: the objects it makes (lines, per-family lists; for the reference
            # path ~10 objects per series) live exactly as long as the render, and collections in the
            # middle would promote them to the old generation, triggering full collections that stall the
            # event loop (300-700 ms at 512 devices before; see also gc.freeze() in exporter.cli). They are
            # freed by reference counting when the render ends.
            enabled = gc.isenabled()
            gc.disable()
            try:
                body = self._body(content_type)
            finally:
                if enabled:
                    gc.enable()
            plain = Rendered(body, content_type, False)
            bodies[(content_type, False)] = (key, polls, plain)
        if not gz:
            return plain
        zipped = Rendered(gzip.compress(plain.body, compresslevel=GZIP_LEVEL), content_type, True)
        bodies[variant] = (key, polls, zipped)
        return zipped

    def _body(self, content_type: str) -> bytes:
        encoder = self._encoders[content_type]
        if isinstance(encoder, FastEncoder) and isinstance(self.collector, Collector):
            return encoder.render(self.collector, self.standard.collect())
        return encoder(self.registry)

    def warm(self) -> None:
        """Re-render the variants asked for within ``WARM_SECONDS`` whose next scrape is due before the
        next poll lands (called after each poll, from the poller's thread, never on the event loop);
        nothing before the first scrape. Meanwhile scrapes get the previous bodies (``peek``)."""
        with self._lock:
            polls = self.collector.polls()
            key = self.collector.render_key()
            now = self.clock()
            for variant in [v for v in self._variants if now - self._asked.get(v, now) > WARM_SECONDS]:
                self._variants.discard(variant)  # not scraped lately: rendered again only when asked
            due = sorted(
                v
                for v in self._variants
                if self.update_period is None or self.forecast.due(v, now, self.update_period)
            )
            bodies = self._servable(polls)  # a variant not due keeps its body for one more poll
            for variant in due:
                entry = bodies.get(variant)
                if entry is None or entry[0] != key:
                    self._render(variant, key, polls, bodies)
            self._bodies = bodies
