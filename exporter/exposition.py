"""Exposition cache: renders /metrics once per new poller state and serves the same bytes until it changes.

A scrape computes the collector's ``render_key()`` (cheap: one tuple per backend plus the attribution) and,
when it equals the cached key, gets the stored body without taking a lock (``peek``). Only on a change does
it render again through prometheus-client (text 0.0.4 or OpenMetrics, chosen by ``choose_encoder`` from the
Accept header) and gzip it if asked. After each poll the poller calls ``warm()``, which re-renders every
variant (format x gzip) that scrapers asked for before, so scrapes normally never render at all. At 512
devices a render costs a few hundred milliseconds of CPU; a cached scrape costs microseconds.

With ``standard=True`` the body also carries ``xpuwatch_build_info`` and the ``process_*`` / ``python_*``
families (exporter.build), read at each render: as of the latest poll, never older than one poll interval
while a backend runs.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry

from exporter.build import register_standard
from exporter.collector import Collector

GZIP_LEVEL = 6

Variant = tuple[str, bool]  # (content type, gzipped)


@dataclass(frozen=True)
class Rendered:
    """One response body: ``body`` is gzip-compressed when ``gzipped``."""

    body: bytes
    content_type: str
    gzipped: bool


class ExpositionCache:
    """Caches rendered bodies per (render key, content type, gzip)."""

    def __init__(self, collector: Collector, standard: bool = False) -> None:
        self.collector = collector
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        if standard:
            register_standard(self.registry)
        self._lock = threading.Lock()
        # (key, bodies) swapped as one tuple so that peek() needs no lock.
        self._state: tuple[object, dict[Variant, Rendered]] = (object(), {})
        self._encoders: dict[Variant, Callable[[Any], bytes]] = {}
        self.renders = 0  # how many times families were rendered (tests, benchmark)

    def peek(self, accept: str, accept_encoding: str) -> Rendered | None:
        """The cached body for these headers if the exporter's state has not changed, or if a render of the
        new state is under way (then the latest rendered body is served rather than waiting), else None."""
        _, content_type = choose_encoder(accept)
        key, bodies = self._state
        hit = bodies.get((content_type, gzip_accepted(accept_encoding)))
        if hit is not None and (self._lock.locked() or key == self.collector.render_key()):
            return hit
        return None

    def get(self, accept: str, accept_encoding: str) -> Rendered:
        """The body for these request headers, rendering only when the exporter's state changed."""
        encoder, content_type = choose_encoder(accept)
        variant = (content_type, gzip_accepted(accept_encoding))
        with self._lock:
            self._encoders.setdefault(variant, encoder)
            key = self.collector.render_key()
            cached_key, bodies = self._state
            bodies = dict(bodies) if key == cached_key else {}
            hit = bodies.get(variant)
            if hit is None:
                hit = self._render(variant, encoder, bodies)
            self._state = (key, bodies)
            return hit

    def _render(
        self, variant: Variant, encoder: Callable[[Any], bytes], bodies: dict[Variant, Rendered]
    ) -> Rendered:
        """Render one variant into ``bodies`` (reusing the plain body of the same format if present)."""
        content_type, gz = variant
        plain = bodies.get((content_type, False))
        if plain is None:
            self.renders += 1
            plain = bodies[(content_type, False)] = Rendered(encoder(self.registry), content_type, False)
        if not gz:
            return plain
        zipped = bodies[variant] = Rendered(
            gzip.compress(plain.body, compresslevel=GZIP_LEVEL), content_type, True
        )
        return zipped

    def warm(self) -> None:
        """Re-render every variant asked for so far (called after each poll, off the event loop)."""
        with self._lock:
            key = self.collector.render_key()
            if key == self._state[0]:
                return
            if not self._encoders:
                default, content_type = choose_encoder("")
                self._encoders[(content_type, False)] = default
            bodies: dict[Variant, Rendered] = {}
            for variant, enc in self._encoders.items():
                if variant not in bodies:
                    self._render(variant, enc, bodies)
            self._state = (key, bodies)
