"""Exposition cache: renders /metrics once per new poller state and serves the same bytes until it changes.

A scrape computes the collector's ``render_key()`` (cheap: one tuple per backend plus the attribution), and
only when it differs from the cached one renders again through prometheus-client (text 0.0.4 or
OpenMetrics, chosen by ``choose_encoder`` from the Accept header) and gzips it if asked. At 512 devices a
render costs tens of milliseconds; a cached scrape costs microseconds.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry

from exporter.collector import Collector


@dataclass(frozen=True)
class Rendered:
    """One response body: ``body`` is gzip-compressed when ``gzipped``."""

    body: bytes
    content_type: str
    gzipped: bool


class ExpositionCache:
    """Caches rendered bodies per (render key, content type, gzip)."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self._lock = threading.Lock()
        self._key: object = None
        self._bodies: dict[tuple[str, bool], Rendered] = {}
        self.renders = 0  # how many times the families were rendered (for tests and the benchmark)

    def get(self, accept: str, accept_encoding: str) -> Rendered:
        """The body for these request headers, rendering only when the exporter's state changed."""
        encoder, content_type = choose_encoder(accept)
        gz = gzip_accepted(accept_encoding)
        key = self.collector.render_key()
        with self._lock:
            if key != self._key:
                self._key = key
                self._bodies = {}
            hit = self._bodies.get((content_type, gz))
            if hit is not None:
                return hit
            plain = self._bodies.get((content_type, False))
            if plain is None:
                self.renders += 1
                plain = Rendered(encoder(self.registry), content_type, False)
                self._bodies[(content_type, False)] = plain
            if not gz:
                return plain
            zipped = Rendered(gzip.compress(plain.body, compresslevel=6), content_type, True)
            self._bodies[(content_type, True)] = zipped
            return zipped

    def warm(self) -> None:
        """Render the default format ahead of the next scrape (called after each poll)."""
        self.get("", "")
