"""FastEncoder writes exactly prometheus-client's bytes (text 0.0.4 and OpenMetrics, every escaping the
Accept header can ask for) for random fleets, on first render and from its prefix cache; families it does
not handle go to the reference; only asked-for variants are rendered, and only while they are scraped."""

from __future__ import annotations

import math

import pytest
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
from exporter.exposition import ExpositionCache, FastEncoder, ScrapeForecast, fast_encoder
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


def test_forecast_takes_the_shortest_recent_gap_and_ignores_a_scrapes_own_peek_then_get() -> None:
    f = ScrapeForecast()
    v = ("application/openmetrics-text", True)
    assert f.interval(v) is None and f.due(v, 0.0, 5.0)  # no forecast yet: render ahead
    for t in (0.0, 0.001, 15.0, 15.002, 30.0):  # peek() then get() of one scrape: one scrape
        f.asked(v, t)
    assert f.interval(v) == pytest.approx(14.998)
    # Next scrape forecast at ~45: a poll at 36 (next lands at 41, +1 s slack = 42) does not render it;
    # a poll at 41 (next at 46) does.
    assert not f.due(v, 36.0, 5.0)
    assert f.due(v, 41.0, 5.0)
    assert f.due(v, 60.0, 5.0)  # overdue: render
    # Two Prometheus replicas out of phase: gaps 7 and 8; the shorter forecast wins.
    g = ScrapeForecast()
    for t in (0.0, 7.0, 15.0, 22.0, 30.0):
        g.asked(v, t)
    assert g.interval(v) == 7.0
    assert g.due(v, 31.5, 5.0) and not g.due(v, 30.5, 0.1)


def test_warm_renders_only_before_a_forecast_scrape_and_an_early_scrape_is_never_stale() -> None:
    col = _Collector()
    cache = ExpositionCache(col, update_period=5.0)  # type: ignore[arg-type]
    now = [0.0]
    cache.clock = lambda: now[0]
    om = "application/openmetrics-text;version=1.0.0"

    def scrape() -> bytes:
        hit = cache.peek(om, "")
        return (hit or cache.get(om, "")).body

    renders_at_poll = []
    for t in range(0, 91, 5):  # polls every 5 s, Prometheus scrapes every 15 s (at 0, 15, 30, ...)
        now[0] = float(t)
        col.key = t
        before = cache.renders
        cache.warm()
        renders_at_poll.append(cache.renders - before)
        if t % 15 == 0:
            now[0] = t + 2.5  # Prometheus scrapes 2.5 s after a poll lands
            assert scrape() == f"# HELP x_ratio x\n# TYPE x_ratio gauge\nx_ratio {float(t)}\n# EOF\n".encode()
    # Until the second scrape there is no forecast: every poll renders. Then only the poll just before
    # each scrape (a scrape within FORECAST_SLACK_SECONDS after a poll would make the poll before render too).
    assert renders_at_poll == [0, 1, 1, 1, 0, 0] + [1, 0, 0] * 4 + [1]
    # Each scrape found its body rendered ahead (renders = polls that rendered + the first scrape's).
    assert cache.renders == sum(renders_at_poll) + 1
    # A scrape earlier than forecast (at 92, forecast 105) gets the newest state, rendered on demand.
    now[0] = 91.0
    col.key = 91
    cache.warm()
    now[0] = 92.0
    assert scrape().endswith(b"x_ratio 91.0\n# EOF\n")
