"""FastEncoder writes exactly prometheus-client's bytes (text 0.0.4 and OpenMetrics, every escaping the
Accept header can ask for) for random fleets, on first render and from its prefix cache; families it does
not handle go to the reference; only asked-for variants are rendered, and only while they are scraped."""

from __future__ import annotations

import dataclasses
import gzip
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

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
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from tests.exporter.fakes import GoodBackend
from xpuwatch.exporter import catalog as C
from xpuwatch.exporter.attribution import (
    EMPTY,
    Attribution,
    Holder,
    MappingStatus,
    StaticAttributionSource,
    slice_key,
)
from xpuwatch.exporter.cgroup import ContainerRef
from xpuwatch.exporter.collector import Collector, RenderInputs, SeriesWriter, families, family
from xpuwatch.exporter.exposition import (
    Cached,
    ExpositionCache,
    FastEncoder,
    Rendered,
    ScrapeForecast,
    fast_encoder,
)
from xpuwatch.exporter.poller import BackendPoller, BackendView, Poller, PollSettings
from xpuwatch.exporter.selection import Selection, known
from xpuwatch.vendors.base import Device, DeviceSample, Partition, ProcessMemory, Slice

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
                partition=draw(
                    st.none()
                    | st.builds(Partition, text, text, st.none() | text, st.none() | text)  # AMD MI300 modes
                ),
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


@pytest.mark.slow
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
    """A collector whose whole state is ``key``; ``poll(key)`` stands for one completed poll."""

    def __init__(self) -> None:
        self.key = 0
        self.completed = 0

    def poll(self, key: int) -> None:
        self.key = key
        self.completed += 1

    def render_key(self) -> int:
        return self.key

    def polls(self) -> int:
        return self.completed

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
    col.poll(1)
    cache.warm()  # the scraped variant is kept warm; text 0.0.4 was never asked for
    assert cache.renders == 2
    assert cache.peek(om, "gzip") is not None and cache.peek("", "") is None
    now[0] = 1000.0  # nobody scraped for longer than WARM_SECONDS
    col.poll(2)
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
        return hit.rendered.body if hit is not None else cache.get(om, "").body

    renders_at_poll = []
    for t in range(0, 91, 5):  # polls every 5 s, Prometheus scrapes every 15 s (at 0, 15, 30, ...)
        now[0] = float(t)
        col.poll(t)
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
    # A scrape earlier than forecast (at 92, forecast 105) gets the body of the poll before (90), marked
    # behind so that the server renders the newest state in the background; nothing rendered meanwhile.
    now[0] = 91.0
    col.poll(91)
    cache.warm()
    now[0] = 92.0
    before = cache.renders
    early = cache.peek(om, "")
    assert early is not None and early.behind and early.rendered.body.endswith(b"x_ratio 90.0\n# EOF\n")
    assert cache.renders == before
    assert cache.get(om, "").body.endswith(b"x_ratio 91.0\n# EOF\n")  # the background render
    hit = cache.peek(om, "")
    assert hit is not None and not hit.behind and hit.rendered.body.endswith(b"x_ratio 91.0\n# EOF\n")


class _Readings(GoodBackend):
    """GoodBackend whose utilization reads 0.01 x the poll number, so each poll's body is recognisable."""

    def sample(self) -> list[DeviceSample]:
        self.calls += 1
        return [DeviceSample(d, utilization_ratio=self.calls / 100) for d in self.devices]


def _polled(listeners: list[Callable[[], None]]) -> tuple[BackendPoller, ExpositionCache]:
    """A real poller (polled by hand, on a frozen clock) feeding a real collector and cache; ``listeners``
    run after each poll in the order given (the exporter registers ``cache.warm`` alone)."""
    poller = Poller()
    backend = poller.add(_Readings(n=1), PollSettings(interval=5.0), clock=lambda: 1.7e9)
    collector = Collector("n1", poller.view, StaticAttributionSource(), lambda: 1.7e9)
    cache = ExpositionCache(collector, update_period=5.0)
    cache.clock = lambda: 100.0  # every scrape at one instant: no forecast, warm() renders every variant
    poller.listeners.extend(listeners)
    return backend, cache


def _utilization(r: Rendered) -> str:
    return re.findall(r"accelerator_utilization_ratio\{[^}]*\} (\S+)", r.body.decode())[0]


def test_a_scrape_between_a_poll_and_its_warm_up_gets_the_previous_body_without_rendering() -> None:
    """Fails before: peek() found the state changed and no lock held, so the scrape rendered in the
    executor (gzip p99 2.4-55x nginx at 512-4,096 devices)."""
    om = "application/openmetrics-text;version=1.0.0"
    seen: list[tuple[Cached | None, int]] = []

    def scrape_before_warm() -> None:  # a scrape landing after the poll published, before warm() ran
        seen.append((cache.peek(om, "gzip"), cache.renders))

    backend, cache = _polled([scrape_before_warm, lambda: cache.warm()])
    backend.poll_once()
    assert seen == [(None, 0)]  # no body yet: this scrape would render (the next test)
    first = cache.get(om, "gzip")
    assert cache.renders == 1
    backend.poll_once()  # poll 2 published; the listener scrapes before warm() renders poll 2
    hit, renders = seen[-1]
    assert hit == Cached(first, True) and renders == 1
    assert _utilization(Rendered(gzip.decompress(hit.rendered.body), om, False)) == "0.01"
    assert cache.renders == 2  # then warm() rendered poll 2, and the next scrape gets it
    now = cache.peek(om, "gzip")
    assert now is not None and not now.behind
    assert _utilization(Rendered(gzip.decompress(now.rendered.body), om, False)) == "0.02"


def test_a_scrape_with_no_body_renders_and_a_body_two_polls_old_is_never_served() -> None:
    """Fails before: peek() served any cached body while a render held the lock, however old it was."""
    backend, cache = _polled([])  # no warm-up: only scrapes render
    backend.poll_once()
    assert cache.peek("", "") is None  # nothing rendered yet: the scrape waits for get()
    assert _utilization(cache.get("", "")) == "0.01" and cache.renders == 1
    backend.poll_once()
    behind = cache.peek("", "")
    assert behind is not None and behind.behind and _utilization(behind.rendered) == "0.01"
    backend.poll_once()  # the body is now two polls old
    assert cache.peek("", "") is None
    with cache._lock:  # even while a render of the new state is under way
        assert cache.peek("", "") is None
    assert _utilization(cache.get("", "")) == "0.03" and cache.renders == 2
    hit = cache.peek("", "")
    assert hit is not None and not hit.behind and _utilization(hit.rendered) == "0.03"


def test_warm_drops_bodies_two_polls_old_and_keeps_the_previous_one_for_a_variant_not_due() -> None:
    backend, cache = _polled([])
    backend.poll_once()
    cache.get("", "")
    cache._variants.clear()  # nobody asked lately: warm() renders nothing
    backend.poll_once()
    cache.warm()
    hit = cache.peek("", "")
    assert hit is not None and hit.behind and _utilization(hit.rendered) == "0.01"
    backend.poll_once()
    cache.warm()
    assert cache._bodies == {} and cache.peek("", "") is None and cache.renders == 1


# --- SeriesWriter: the exporter's own render path (straight from samples, no Metric objects) ---------------

DECLARED = "accelerator_huawei_aicpu_utilization_ratio"  # a vendor metric a registration declares
WEIRD = st.text(alphabet=st.sampled_from(list('aZ0 ."\\\n{}=,_:é显\U0001f600')), max_size=6)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0, 1, True, False, 1e21, 1e6, 1234567.0, 5e-324, -1e-7, 2**63]),
    st.integers(-(2**80), 2**80),
)
HOLDERS = st.builds(
    Holder, WEIRD, WEIRD, WEIRD, st.sampled_from(["notebook", "job", "service", "unknown"]), WEIRD
) | st.builds(Holder.batch_job, WEIRD.filter(bool), WEIRD, WEIRD)  # Slurm jobs (exporter.jobmap)


@st.composite
def slices_of(draw: st.DrawFn, uuid: str) -> tuple[Slice, ...]:
    out = []
    for j in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["mig", "vgpu"]))
        out.append(
            Slice(
                draw(st.sampled_from([uuid, ""])),
                f"{j}/" + draw(WEIRD),
                draw(WEIRD),
                kind,
                f"MIG-{uuid}-{j}" if kind == "mig" and draw(st.booleans()) else None,
                draw(st.none() | NUMBERS),
                draw(st.none() | NUMBERS),
                draw(st.none() | NUMBERS),
                draw(st.none() | NUMBERS),
            )
        )
    return tuple(out)


@st.composite
def poll_of(draw: st.DrawFn, devices: list[Device]) -> list[DeviceSample]:
    """One poll's samples of ``devices``: every reading kind, any value, some devices lost."""
    out = []
    for d in devices:
        if draw(st.integers(0, 4)) == 0:
            out.append(
                dataclasses.replace(
                    DeviceSample.lost(d, "lost"),
                    fault_events=draw(
                        st.dictionaries(st.sampled_from(["79", "48", "31"]), NUMBERS, max_size=2)
                    ),
                )
            )
            continue
        keys = st.sampled_from(["core", "memory", "hotspot", 'x"y', "a\\b\n"])
        out.append(
            DeviceSample(
                d,
                utilization_ratio=draw(st.none() | NUMBERS),
                memory_used_bytes=draw(st.none() | NUMBERS),
                memory_total_bytes=draw(st.none() | NUMBERS),
                power_watts=draw(st.none() | NUMBERS),
                energy_joules=draw(st.none() | NUMBERS),
                temperatures_celsius=draw(st.dictionaries(keys, NUMBERS, max_size=3)),
                clocks_hertz=draw(st.dictionaries(st.sampled_from(["sm", "mem"]), NUMBERS, max_size=2)),
                clock_throttled=draw(st.dictionaries(keys, st.booleans(), max_size=2)),
                ecc_errors=draw(st.dictionaries(st.sampled_from(["corrected", "uncorrected"]), NUMBERS)),
                remapped_rows=draw(st.dictionaries(st.sampled_from(["correctable"]), st.integers(0, 9))),
                remap_pending=draw(st.none() | st.booleans()),
                remap_failed=draw(st.none() | st.booleans()),
                fault_events=draw(st.dictionaries(st.sampled_from(["79", "48", "31"]), NUMBERS, max_size=2)),
                pcie_replay_errors=draw(st.none() | st.integers(0, 2**40)),
                link_errors=draw(
                    st.dictionaries(st.tuples(st.sampled_from(["0", "1", "2"]), WEIRD), NUMBERS, max_size=2)
                ),
                health=draw(st.dictionaries(keys, st.booleans(), max_size=2)),
                vendor_metrics=draw(
                    st.dictionaries(
                        st.sampled_from([DECLARED, "accelerator_x_undeclared", "not_accelerator"]),
                        NUMBERS,
                        max_size=2,
                    )
                ),
                slices=draw(slices_of(d.uuid)),
                processes=draw(
                    st.none()
                    | st.lists(
                        st.builds(ProcessMemory, st.integers(1, 6), st.none() | NUMBERS), max_size=4
                    ).map(tuple)
                ),
            )
        )
    return out


@st.composite
def states(draw: st.DrawFn) -> tuple[list[Device], list[RenderInputs]]:
    """A node's devices and three consecutive render inputs: new values, attribution and pids each time."""
    devices = [
        Device(
            draw(st.sampled_from(["nvidia", "amd", "huawei", "hygon"])),
            draw(WEIRD),
            draw(WEIRD),
            f"u{i}-" + draw(WEIRD),
            draw(st.none() | WEIRD),
            draw(st.none() | WEIRD),
            draw(st.none() | WEIRD),
        )
        for i in range(draw(st.integers(0, 4)))
    ]
    kube = draw(st.booleans())  # pod mapping on: processes are named by container
    out = []
    for _ in range(3):
        samples = draw(poll_of(devices))
        split = draw(st.integers(0, len(samples)))
        views = (
            BackendView(
                "b0", draw(st.booleans()), tuple(samples[:split]), split, 1.7e9, 0.25, {"timeout": 2}, 1, True
            ),
            BackendView("b1", True, tuple(samples[split:]), 9, None, None, {draw(WEIRD) or "x": 1}, 1, True),
        )
        keys = [d.uuid for d in devices] + [
            sl.uuid or slice_key(sl.parent_uuid, sl.slice_id) for s in samples for sl in s.slices
        ]
        holders = {k: draw(st.lists(HOLDERS, max_size=2)) for k in keys if draw(st.booleans())}
        containers = {f"c{i}": draw(HOLDERS) for i in range(draw(st.integers(0, 3)))}
        refs = st.none() | st.builds(ContainerRef, st.just("pod"), st.sampled_from(["", "c0", "c1", "c9"]))
        pids = {pid: draw(refs) for pid in range(1, 7) if draw(st.booleans())}
        status = draw(
            st.none()
            | st.builds(
                MappingStatus,
                st.booleans(),
                st.none() | NUMBERS,
                st.lists(st.tuples(WEIRD, st.integers(0, 9)), max_size=2).map(tuple),
            )
        )
        job_status = draw(
            st.none() | st.builds(MappingStatus, st.booleans(), st.none() | NUMBERS, st.just((("files", 2),)))
        )
        out.append(
            RenderInputs(
                "node-" + draw(WEIRD),
                views,
                Attribution.of(holders, containers),
                draw(st.none() | st.booleans()),
                status,
                pids if kube else None,
                job_status,
            )
        )
    return devices, out


class Node:
    """Render inputs a test sets, served through the real Collector (its ``inputs()`` and ``collect()``):
    the poller's views, the attribution source, the mapping status and (``kube``) the pid lookup."""

    def __init__(self, kube: bool, selection: Selection | None = None) -> None:
        self.inp = RenderInputs("n", (), EMPTY, None)
        self.collector = Collector(
            "n",
            lambda now: self.inp.views,
            self,
            lambda: 0.0,
            lambda: self.inp.status,
            self.pid if kube else None,
            selection,
            lambda: self.inp.job_status,
        )

    def current(self) -> Attribution:
        return self.inp.attribution

    def up(self) -> bool | None:
        return self.inp.mapping_up

    def pid(self, pid: int) -> ContainerRef | None:
        return self.inp.pids.get(pid) if self.inp.pids is not None else None

    def set(self, inp: RenderInputs) -> None:
        self.inp = inp
        self.collector.node = inp.node


def encoders() -> Iterator[tuple[str, Callable[[Any], bytes], FastEncoder]]:
    """For each negotiated Accept: prometheus-client's encoder and the FastEncoder standing for it."""
    for accept in ACCEPTS:
        encoder, _ = choose_encoder(accept)
        fast = fast_encoder(encoder)
        assert isinstance(fast, FastEncoder)
        yield accept, encoder, fast


@pytest.mark.slow
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(state=states())
def test_series_writer_is_byte_identical_to_prometheus_client(
    state: tuple[list[Device], list[RenderInputs]],
) -> None:
    _, polls = state
    node = Node(kube=polls[0].pids is not None)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node.collector)
    for accept, encoder, fast in encoders():
        for inp in (*polls, polls[0]):  # first render, the same devices with new everything, then back
            node.set(inp)
            assert fast.render(node.collector) == encoder(registry), accept


@pytest.mark.slow
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(state=states(), off=st.sets(st.sampled_from(known())))
def test_series_writer_is_byte_identical_to_prometheus_client_under_any_selection(
    state: tuple[list[Device], list[RenderInputs]], off: set[str]
) -> None:
    """Families switched off and breakdowns combined: the fast path still writes prometheus-client's bytes
    over families() with the same selection."""
    _, polls = state
    node = Node(kube=polls[0].pids is not None, selection=Selection(frozenset(off)))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node.collector)
    for accept, encoder, fast in encoders():
        for inp in (*polls, polls[0]):
            node.set(inp)
            assert fast.render(node.collector) == encoder(registry), accept


def full_node() -> RenderInputs:
    """Every family the catalog has, with pods on the device, on slices and on processes."""
    d = Device("nvidia", "NVIDIA A100", "0", "GPU-a", "0000:01:00.0", "550.54.15", "1320")
    mig = Slice("GPU-a", "1/0", "1g.10gb", "mig", "MIG-a", 1.0, 2.0, 1 / 7, 0.5, 0.25, -0.0)
    vgpu = Slice("GPU-a", "v1", "vgpu", "vgpu", None, 5.0, 4.0, 0.3, 0.2, 0.1, 0.05)  # used above its limit
    s = DeviceSample(
        d,
        utilization_ratio=0.97,
        sm_active_ratio=0.8,
        sm_occupancy_ratio=0.4,
        tensor_active_ratio=0.3,
        memory_bandwidth_utilization_ratio=0.6,
        memory_used_bytes=80e9,
        memory_total_bytes=85899345920,
        memory_used_ratio=0.5,
        temperatures_celsius={"core": 60, "memory": 70, "hotspot": 151.0},  # implausible: above 150 C
        power_watts=300.5,
        power_limit_watts=400,
        energy_joules=1e21,
        clocks_hertz={"sm": 1.41e9},
        clock_throttled={"hw_thermal": True, "gpu_idle": False},
        ecc_errors={"corrected": 3, "uncorrected": 0},
        remapped_rows={"correctable": 0, "uncorrectable": 2},
        remap_pending=True,
        remap_failed=False,
        fault_events={"79": 1, "48": 0},
        pcie_replay_errors=2**62,
        link_errors={("0", "crc_flit"): 5},
        health={"pcie": True, "memory": False},
        vendor_metrics={DECLARED: math.inf},
        slices=(mig, vgpu),
        processes=(
            ProcessMemory(10, 1e9),
            ProcessMemory(11, 2e9),
            ProcessMemory(12, None),
            ProcessMemory(13, 5.0),
        ),
    )
    lost = DeviceSample.lost(
        Device("amd", "MI300X", "1", "amd-1", partition=Partition("amd-0", "1", "CPX", "NPS4")), "timeout"
    )
    alice = Holder("ml", 'jupyter-"alice"', "notebook", "notebook", "alice\\", (("label_team", 'v"x\n\\'),))
    bob = Holder("ml", "train-0", "trainer\n显存", "job", "")
    views = (BackendView("nvml", True, (s, lost), 2, 1.7e9, 0.25, {"timeout": 1, "field": 2}, 1, True),)
    return RenderInputs(
        "node-1",
        views,
        Attribution.of(
            {
                "GPU-a": [alice],
                "MIG-a": [bob],
                slice_key("GPU-a", "v1"): [alice, bob],
                "amd-1": [Holder.batch_job("4242", 'carol"', "gpu\n")],  # a Slurm job (exporter.jobmap)
            },
            {"c1": bob},
        ),
        True,
        MappingStatus(
            True, 1.7e9, (("nvidia.com/gpu", 2), ("dra:gpu.nvidia.com", 1)), (("huawei.com/Ascend910", 1),)
        ),
        {10: ContainerRef("pod-uid", "c1"), 11: None, 13: ContainerRef("pod-uid", "")},
        MappingStatus(False, 1.6e9, (("files", 1),)),
    )


def test_series_writer_writes_every_family_as_prometheus_client_does() -> None:
    node = Node(kube=True)
    node.set(full_node())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node.collector)
    for accept, encoder, fast in encoders():
        for _ in range(2):  # first render, then from the prefix cache
            body = fast.render(node.collector)
            assert body == encoder(registry), accept
    named = {
        f.name
        for f in families(
            "node-1",
            node.inp.views,
            node.inp.attribution,
            True,
            None,
            None,
            node.inp.status,
            node.inp.pids,
            job_status=node.inp.job_status,
        )
    }
    core = {family(m.name, m).name for m in C._CORE}
    assert named == core | {DECLARED}  # the example reaches every family of the catalog


def test_series_writer_keeps_only_what_the_last_render_served() -> None:
    writer = SeriesWriter(C.by_name(), lambda name, labels: f"{name}{sorted(labels.items())} ")
    a = Device("nvidia", "A100", "0", "GPU-a")

    def poll(devices: list[Device], sensors: dict[str, float]) -> RenderInputs:
        samples = tuple(DeviceSample(d, temperatures_celsius=sensors) for d in devices)
        return RenderInputs(
            "n", (BackendView("b", True, samples, len(samples), 1.0, 0.1, {}, 1, True),), EMPTY, None
        )

    lines = writer.write(poll([a], {"core": 1.0}))
    # up, info, temperature; 4 of the backend; xpuwatch_render_series
    assert sum(map(len, lines)) == 3 + 4 + 1 and writer.held() == 3
    others = [Device("amd", "MI250X", str(i), f"amd-{i}") for i in range(3)]
    writer.write(poll(others, {}))
    assert writer.held() == 6  # GPU-a's entry is gone: 3 devices x (up, info)
    for i in range(200):  # a device whose sensor names change every poll
        lines = writer.write(poll([a], {f"s{i}": 1.0, f"s{i + 1}": 2.0}))
        assert writer.held() <= 2 * sum(map(len, lines)) + 64
    assert lines[list(C.by_name()).index(C.TEMPERATURE)] == [
        f"{C.TEMPERATURE}{sorted({'node': 'n', 'vendor': 'nvidia', 'model': 'A100', 'device': '0', 'uuid': 'GPU-a', 'sensor': s}.items())} {v}\n"
        for s, v in (("s199", "1.0"), ("s200", "2.0"))
    ]


def test_series_writer_keeps_the_texts_of_two_renders_values_only() -> None:
    """Value texts are remembered from one render to the next (most values repeat), never beyond: before,
    a changing value (a counter, a reading) stayed until 4,096 + 2 x series texts had piled up, a sawtooth
    of several MiB at fleet size (issue 36)."""
    writer = SeriesWriter(C.by_name(), lambda name, labels: f"{name}{sorted(labels.items())} ")
    a = Device("nvidia", "A100", "0", "GPU-a")
    for i in range(300):
        sample = DeviceSample(a, temperatures_celsius={"core": 40.0 + i / 8}, power_watts=250.0)
        view = BackendView("b", True, (sample,), 1, 1.0, 0.1, {}, 1, True)
        lines = writer.write(RenderInputs("n", (view,), EMPTY, None))
    temperature = lines[list(C.by_name()).index(C.TEMPERATURE)]
    assert temperature[0].endswith(" 77.375\n") and writer.texts() <= 2 * sum(map(len, lines))


def test_cache_serves_prometheus_clients_bytes_with_the_standard_families() -> None:
    node = Node(kube=True)
    node.set(full_node())
    cache = ExpositionCache(node.collector, standard=True)
    for accept in ACCEPTS:
        got = cache.get(accept, "").body.decode()
        want = choose_encoder(accept)[0](cache.registry).decode()
        # The standard families (process CPU, GC counts) move between the two renders: compare their
        # headers, and everything before them byte for byte.
        head, rest = re.split(r"^(?=# HELP xpuwatch_+build_+info )", got, flags=re.M)
        want_head, want_rest = re.split(r"^(?=# HELP xpuwatch_+build_+info )", want, flags=re.M)
        assert head == want_head, accept
        headers = [line for line in rest.splitlines() if line.startswith("#")]
        assert headers == [line for line in want_rest.splitlines() if line.startswith("#")]


def test_series_writer_reuses_a_fields_lines_only_while_they_print_alike() -> None:
    node = Node(kube=False)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node.collector)
    fast = fast_encoder(choose_encoder("")[0])
    assert isinstance(fast, FastEncoder)
    d = Device("nvidia", "A100", "0", "GPU-a")
    nan = math.nan
    polls: list[dict[str, float]] = [
        {"corrected": 0, "uncorrected": 1},
        {"corrected": 0, "uncorrected": 1},  # unchanged: lines reused
        {"corrected": -0.0, "uncorrected": True},  # equal values, other types
        {"corrected": -0.0, "uncorrected": True},
        {"corrected": 0.0, "uncorrected": True},  # equal to -0.0, printed otherwise
        {"corrected": nan, "uncorrected": 2**70},
        {"corrected": nan, "uncorrected": 2**70 + 1},  # a different int, the same float
        {"uncorrected": 2**70 + 1, "corrected": nan},  # the same keys in another order
    ]
    for ecc in polls:
        view = BackendView(
            "b",
            True,
            (DeviceSample(d, ecc_errors=ecc, health={"pcie": ecc["corrected"] == 0}),),
            1,
            1.0,
            0.1,
            {},
            1,
            True,
        )
        node.set(RenderInputs("n", (view,), EMPTY, None))
        body = fast.render(node.collector)
        assert body == choose_encoder("")[0](registry), ecc
        assert (
            'type="corrected",uuid="GPU-a",vendor="nvidia"} ' + floatToGoString(ecc["corrected"])
            in body.decode()
        )
