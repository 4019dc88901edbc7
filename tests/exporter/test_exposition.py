"""FastEncoder writes exactly prometheus-client's bytes (text 0.0.4 and OpenMetrics, every escaping the
Accept header can ask for) for random fleets, on first render and from its prefix cache; families it does
not handle go to the reference; only asked-for variants are rendered, and only while they are scraped."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from exporter.attribution import EMPTY
from exporter.collector import families
from exporter.exposition import ExpositionCache, FastEncoder, fast_encoder
from exporter.poller import BackendView
from vendors.base import Device, DeviceSample

ACCEPTS = [
    "",  # text 0.0.4
    "text/plain;version=1.0.0;escaping=allow-utf-8",
    "text/plain;version=1.0.0;escaping=dots",
    "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",  # Prometheus' own
    "application/openmetrics-text",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8",
    "application/openmetrics-text;version=1.0.0;escaping=values",
    "application/openmetrics-text;version=2.0.0;escaping=dots",
]

text = st.text(alphabet=st.sampled_from(list('ab.Z 0"\\\n{}=,-_:é显存\U0001f600')), min_size=0, max_size=12)
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 1e21, 123456789.0, 5e-324]),
    st.integers(-(2**60), 2**60).map(float),
)


@st.composite
def fleets(draw: st.DrawFn) -> list[BackendView]:
    views = []
    for b in range(draw(st.integers(1, 2))):
        samples = []
        for i in range(draw(st.integers(0, 4))):
            d = Device(
                draw(st.sampled_from(["nvidia", "amd", "huawei"])),
                draw(text),
                str(i),
                f"uuid-{b}-{i}-" + draw(text),
                draw(st.one_of(st.none(), text)),
                draw(st.one_of(st.none(), text)),
                draw(st.one_of(st.none(), text)),
            )
            if draw(st.booleans()):
                samples.append(DeviceSample.lost(d, "lost"))
                continue
            samples.append(
                DeviceSample(
                    d,
                    utilization_ratio=draw(st.one_of(st.none(), values)),
                    memory_used_bytes=draw(st.one_of(st.none(), values)),
                    power_watts=draw(st.one_of(st.none(), values)),
                    temperatures_celsius=draw(st.dictionaries(text, values, max_size=2)),
                    ecc_errors=draw(st.dictionaries(st.sampled_from(["corrected", "uncorrected"]), values)),
                    fault_events=draw(st.dictionaries(st.integers(0, 200), values, max_size=2)),
                )
            )
        errors = {"timeout": draw(st.integers(0, 5)), draw(text) or "x": 1}
        views.append(
            BackendView(
                f"b{b}", draw(st.booleans()), tuple(samples), len(samples), 1.7e9, 0.25, errors, 1, True
            )
        )
    return views


class Registry:
    def __init__(self, fams: list[Metric]) -> None:
        self.fams = fams

    def collect(self) -> list[Metric]:
        return self.fams


def reference(accept: str, fams: list[Metric]) -> bytes:
    encoder, _ = choose_encoder(accept)
    return encoder(Registry(fams))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet=fleets(), again=fleets(), mapping_up=st.one_of(st.none(), st.booleans()))
def test_fast_encoder_is_byte_identical_to_prometheus_client(
    fleet: list[BackendView], again: list[BackendView], mapping_up: bool | None
) -> None:
    for accept in ACCEPTS:
        encoder, _ = choose_encoder(accept)
        fast = fast_encoder(encoder)
        assert isinstance(fast, FastEncoder)
        for views in (fleet, again, fleet):  # first render, a different fleet, then from the cache
            fams = families("node-1", views, EMPTY, mapping_up)
            assert fast(Registry(fams)) == reference(accept, fams), accept


def test_families_the_fast_path_does_not_write_go_to_the_reference() -> None:
    ts = GaugeMetricFamily("with_timestamp", "a gauge with a timestamp", labels=["a"])
    ts.add_metric(["x"], 1.5, timestamp=1700000000.5)
    hist = HistogramMetricFamily(
        "latency_seconds", "a histogram", buckets=[("0.1", 1), ("+Inf", 3)], sum_value=0.7
    )
    created = CounterMetricFamily("jobs", "a counter with _created", created=1700000000.0)
    created.add_metric([], 3)
    plain = GaugeMetricFamily("plain_ratio", 'help with \\ and "quotes"\nand a newline', value=math.nan)
    fams: list[Metric] = [ts, hist, created, plain]
    for accept in ACCEPTS:
        fast = fast_encoder(choose_encoder(accept)[0])
        for _ in range(2):
            assert fast(Registry(fams)) == reference(accept, fams), accept


class _Collector:
    def __init__(self) -> None:
        self.key = 0

    def render_key(self) -> int:
        return self.key

    def collect(self) -> list[Metric]:
        return [GaugeMetricFamily("x_ratio", "x", value=float(self.key))]


def test_only_asked_variants_are_rendered_and_only_while_scraped() -> None:
    col = _Collector()
    cache = ExpositionCache(col)  # type: ignore[arg-type]
    now = [0.0]
    cache.clock = lambda: now[0]
    cache.warm()
    assert cache.renders == 0  # nothing rendered before the first scrape
    om = "application/openmetrics-text;version=1.0.0"
    assert cache.get(om, "gzip").gzipped and cache.renders == 1
    col.key = 1
    cache.warm()  # the scraped variant is kept warm; text 0.0.4 was never asked for
    assert cache.renders == 2
    assert cache.peek(om, "gzip") is not None and cache.peek("", "") is None
    now[0] = 1000.0  # nobody scraped for longer than WARM_SECONDS
    col.key = 2
    cache.warm()
    assert cache.renders == 2
    assert cache.get(om, "gzip").body and cache.renders == 3  # rendered again when asked
