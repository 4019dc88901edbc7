"""Metric selection (exporter.selection): flags, config and env in precedence; every family and breakdown
switched off in turn; aggregates; blind-rule warnings; the series budget per device."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import choose_encoder
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from tests.exporter.conftest import Exporter, run_cli
from tests.exporter.test_exposition import Node, full_node
from xpuwatch.exporter import budget
from xpuwatch.exporter import catalog as C
from xpuwatch.exporter.attribution import Attribution
from xpuwatch.exporter.build import VOLATILE_PREFIXES
from xpuwatch.exporter.cli import warn_blind
from xpuwatch.exporter.collector import families
from xpuwatch.exporter.exposition import FastEncoder, fast_encoder
from xpuwatch.exporter.poller import BackendView
from xpuwatch.exporter.readers import SHIPPED, parse, shipped_readers
from xpuwatch.exporter.selection import Layer, Selection, blind, breakdowns, known, split_flags
from xpuwatch.exporter.settings import ConfigError, load
from xpuwatch.vendors.base import Device, DeviceSample

LINK = "accelerator_link_errors_total.link"
REASON = "accelerator_clock_throttled.reason"


# ---------------------------------------------------------------------------------------------------------
# flags, config, env


def test_flags_are_taken_out_of_argv_as_node_exporter_spells_them() -> None:
    rest, layer = split_flags(
        [
            "serve",
            "--no-collector.accelerator_up",
            "--collector.disable-defaults",
            "--collector." + LINK,
            "-v",
        ]
    )
    assert rest == ["serve", "-v"]
    assert layer == Layer((LINK,), ("accelerator_up",), True)
    assert split_flags(["serve", "--", "--collector.x"]) == (["serve", "--", "--collector.x"], Layer())


def test_file_then_env_then_flags_per_name(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"metrics: {{exclude: [accelerator_power_watts, {REASON}], include: [{LINK}, accelerator_up]}}\n"
    )
    s = load(str(cfg), {}, {})
    assert s.metrics.off == {"accelerator_power_watts", REASON}
    env = {"XPUWATCH_METRICS_EXCLUDE": f"{LINK}, accelerator_up", "XPUWATCH_METRICS_INCLUDE": REASON}
    s = load(str(cfg), env, {})
    assert s.metrics.off == {"accelerator_power_watts", LINK, "accelerator_up"}
    s = load(str(cfg), env, {"metrics": Layer(("accelerator_power_watts", LINK), (REASON,))})
    assert s.metrics.off == {"accelerator_up", REASON}


def test_disable_defaults_keeps_only_the_included_and_the_self_metrics() -> None:
    s = load(None, {"XPUWATCH_METRICS_DISABLE_DEFAULTS": "true"}, {"metrics": Layer(("accelerator_up",))})
    on = {n for n in known() if n not in s.metrics.off}
    assert on == {"accelerator_up"} | {n for n, d in C.by_name().items() if d.scope == "exporter"}
    # the flag beats the environment
    s = load(None, {"XPUWATCH_METRICS_DISABLE_DEFAULTS": "true"}, {"metrics": Layer((), (), False)})
    assert s.metrics == Selection.default()


@pytest.mark.parametrize(
    ("env", "flags", "doc", "message"),
    [
        ({}, Layer((), ("accelerator_nope",)), "", "--no-collector.accelerator_nope: unknown metric family"),
        ({}, Layer(("x.link",)), "", "--collector.x.link: unknown metric family or breakdown 'x.link'"),
        ({"XPUWATCH_METRICS_INCLUDE": "nope"}, Layer(), "", "XPUWATCH_METRICS_INCLUDE: unknown"),
        ({}, Layer(), "metrics: {exclude: [nope]}", "metrics.exclude: unknown"),
        ({}, Layer(), "metrics: {exclude: [accelerator_up], include: [accelerator_up]}", "also included"),
        ({}, Layer(), "metrics: {excluded: []}", "metrics.excluded: unknown key"),
        ({}, Layer(), "metrics: {disable_defaults: yes please}", "metrics.disable_defaults: must be true"),
        ({"XPUWATCH_METRICS_DISABLE_DEFAULTS": "1"}, Layer(), "", "XPUWATCH_METRICS_DISABLE_DEFAULTS: must"),
    ],
)
def test_bad_selection_is_a_config_error(
    tmp_path: Path, env: dict[str, str], flags: Layer, doc: str, message: str
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(doc)
    with pytest.raises(ConfigError) as err:
        load(str(cfg), env, {"metrics": flags})
    assert message in str(err.value)
    if "unknown metric" in message:
        assert f"(known: {', '.join(known())})" in str(err.value)


@pytest.mark.slow
def test_serve_refuses_an_unknown_name_with_the_known_ones_exit_2() -> None:
    res = run_cli("serve", "--simulate", "--web.listen-address", "127.0.0.1:0", "--no-collector.gpu_temp")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "xpuwatch: config error: --no-collector.gpu_temp: unknown metric family or breakdown 'gpu_temp' "
        "(known: accelerator_up, accelerator_info,"
    )
    assert LINK in lines[0]
    res = run_cli("rules", "generate", "--check", "--collector.accelerator_up")
    assert res.returncode == 2 and "are flags of `xpuwatch serve`" in res.stderr


# ---------------------------------------------------------------------------------------------------------
# every family and breakdown off in turn


def _render(selection: Selection) -> str:
    """The /metrics body of the example node that reaches every family (tests/exporter/test_exposition.py),
    through the fast path, checked against prometheus-client over families()."""
    node = Node(kube=True, selection=selection)
    node.set(full_node())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node.collector)
    encoder, _ = choose_encoder("text/plain")
    fast = fast_encoder(encoder)
    assert isinstance(fast, FastEncoder)
    body = fast.render(node.collector)
    assert body == encoder(registry)
    return body.decode()


def _blocks(body: str) -> dict[str, list[str]]:
    """Family name (as in # HELP) -> its lines, in order."""
    out: dict[str, list[str]] = {}
    name = ""
    for line in body.splitlines(keepends=True):
        if line.startswith("# HELP "):
            name = line.split()[2]
        out.setdefault(name, []).append(line)
    return out


def _exposed(name: str) -> str:
    d = C.by_name()[name]
    return name if d.type != "info" or name.endswith("_info") else name + "_info"


ALL_ON = Selection()


@pytest.mark.parametrize("name", list(C.by_name()))
def test_each_family_off_is_the_body_without_it(name: str) -> None:
    """Golden per case: the body with every breakdown on, less the family's block, with
    xpuwatch_render_series lowered by the series it had."""
    full = _blocks(_render(ALL_ON))
    got = _render(Selection(frozenset({name})))
    exposed = _exposed(name)
    removed = len([x for x in full.get(exposed, []) if not x.startswith("#")])
    expected = {k: v for k, v in full.items() if k != exposed}
    if name != C.RENDER_SERIES:
        count = expected[C.RENDER_SERIES][-1]
        total = int(float(count.split()[-1]))
        expected[C.RENDER_SERIES] = [
            *expected[C.RENDER_SERIES][:-1],
            f"{C.RENDER_SERIES} {total - removed}.0\n",
        ]
    assert got == "".join(line for lines in expected.values() for line in lines)
    assert f"\n{exposed}" not in got and f"# HELP {exposed} " not in got


def _series(body: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(body)
        for s in f.samples
        if s.name == name
    }


@pytest.mark.parametrize("key", list(breakdowns()))
def test_each_breakdown_off_keeps_its_family_combined(key: str) -> None:
    b = breakdowns()[key]
    full = _series(_render(ALL_ON), b.family)
    got = _series(_render(Selection(frozenset({key}))), b.family)
    assert full, f"the example has no {b.family} series"
    want: dict[tuple[tuple[str, str], ...], float] = {}
    for labels, v in full.items():
        k = tuple(item for item in labels if item[0] not in b.labels)
        want[k] = v if k not in want else (want[k] + v if b.aggregate == "sum" else max(want[k], v))
    assert got == want
    assert all(not set(b.labels) & {k for k, _ in labels} for labels in got)


def test_link_errors_default_is_summed_over_links_per_type() -> None:
    """The default: per-link off, one series per device and error type (golden)."""
    dev = Device("nvidia", "NVIDIA H100", "0", "GPU-h")
    links = {
        (str(link), t): link + 10 * i for link in range(18) for i, t in enumerate(("crc_flit", "replay"))
    }
    view = BackendView("nvml", True, (DeviceSample(dev, link_errors=links),), 1, 1.0, 0.1, {}, 1, True)
    node = Node(kube=False)
    node.set(node.inp.__class__("n", (view,), Attribution(), None))
    text = _text(node)
    ident = 'device="0",model="NVIDIA H100",node="n",'
    assert [x for x in text.splitlines() if x.startswith("accelerator_link_errors_total")] == [
        f'accelerator_link_errors_total{{{ident}type="crc_flit",uuid="GPU-h",vendor="nvidia"}} 153.0',
        f'accelerator_link_errors_total{{{ident}type="replay",uuid="GPU-h",vendor="nvidia"}} 333.0',
    ]


def _text(node: Node) -> str:
    encoder, _ = choose_encoder("text/plain")
    fast = fast_encoder(encoder)
    assert isinstance(fast, FastEncoder)
    return fast.render(node.collector).decode()


@settings(max_examples=80, deadline=None)
@given(
    links=st.dictionaries(
        st.tuples(
            st.integers(0, 17).map(str), st.sampled_from(["crc_flit", "crc_data", "replay", "recovery"])
        ),
        st.integers(0, 2**53),
        max_size=40,
    ),
    off=st.sets(st.sampled_from(["accelerator_link_errors_total.link", "accelerator_up", REASON])),
)
def test_link_error_aggregate_is_the_sum_per_type(links: dict[tuple[str, str], int], off: set[str]) -> None:
    dev = Device("nvidia", "NVIDIA H100", "0", "GPU-h")
    view = BackendView("nvml", True, (DeviceSample(dev, link_errors=links),), 1, 1.0, 0.1, {}, 1, True)
    fams = families("n", [view], Attribution(), None, selection=Selection(frozenset(off)))
    got = {
        (s.labels.get("link"), s.labels["type"]): s.value
        for f in fams
        for s in f.samples
        if s.name == C.LINK_ERRORS
    }
    if LINK in off:
        sums: dict[str, float] = defaultdict(float)
        for (_, t), n in sorted(links.items()):
            sums[t] += float(n)
        assert got == {(None, t): v for t, v in sums.items()}
    else:
        assert got == {(link, t): float(n) for (link, t), n in links.items()}
    node = Node(kube=False, selection=Selection(frozenset(off)))
    node.set(node.inp.__class__("n", (view,), Attribution(), None))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(node.collector)
    encoder, _ = choose_encoder("text/plain")
    assert _text(node).encode() == encoder(registry)


# ---------------------------------------------------------------------------------------------------------
# blind rules and panels


def test_reads_indexes_are_shipped_and_name_catalog_families() -> None:
    readers = shipped_readers()
    assert {p.name for p in SHIPPED} == {"reads.yaml"} and all(p.is_file() for p in SHIPPED)
    assert {r.kind for r in readers} == {"alert", "record", "panel"}
    names = set(C.by_name())
    assert all(set(r.families) <= names for r in readers)
    by_name = {r.name: r for r in readers}
    assert by_name["AcceleratorEccUncorrectable"].families == (C.ECC_ERRORS,)
    assert by_name["AcceleratorThermalThrottling"].labels == {C.CLOCK_THROTTLED: ("reason",)}
    # no generated rule or panel reads the link: the default selection leaves nothing blind
    assert blind(Selection.default(), readers) == []


@pytest.mark.parametrize("name", [n for n in C.by_name()] + list(breakdowns()))
def test_each_name_off_warns_of_exactly_the_rules_and_panels_it_blinds(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    readers = shipped_readers()
    fam = breakdowns()[name].family if name in breakdowns() else name
    labels = set(breakdowns()[name].labels) if name in breakdowns() else set()
    want = [r for r in readers if fam in r.families and (not labels or labels & set(r.labels.get(fam, ())))]
    with caplog.at_level(logging.WARNING, logger="xpuwatch"):
        warn_blind(Selection(Selection.default().off | {name}))
    got = [rec.getMessage() for rec in caplog.records]
    assert got == [
        f"metric selection: {name} is off; generated alert {r.name} fires when it disappears: expect it for each "
        "device that reported it, until its lookback passes (silence it, or set its metrics in a user spec)"
        if name in r.absent_fires
        else f"metric selection: {name} is off; generated {r.kind} {r.name} reads it and will see no data"
        for r in want
    ]


def test_switching_off_a_watched_hardware_signal_says_the_absence_alert_fires(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Temperature off: AcceleratorTelemetryMissing does not go quiet, it fires for every device that had it
    (promtool on the generated rule, below); the start-up warning said "will see no data" (new-user finding)."""
    (reader,) = [r for r in shipped_readers() if r.name == "AcceleratorTelemetryMissing"]
    assert set(reader.absent_fires) == {C.TEMPERATURE, C.ECC_ERRORS, C.HEALTH}
    assert not [
        r.name for r in shipped_readers() if r.absent_fires and r.name != "AcceleratorTelemetryMissing"
    ]
    with caplog.at_level(logging.WARNING, logger="xpuwatch"):
        warn_blind(Selection(Selection.default().off | {C.TEMPERATURE}))
    assert any(
        "AcceleratorTelemetryMissing fires when it disappears" in r.getMessage() for r in caplog.records
    )
    promtool = shutil.which("promtool")
    assert promtool
    ident = 'node="n",vendor="nvidia",model="m",device="0",uuid="u",job="xpuwatch"'
    test = {
        "rule_files": [str(Path("alerts/generated/rules.yml").resolve())],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": f'accelerator_temperature_celsius{{{ident},sensor="core"}}',
                        "values": "50x10",
                    },
                    {"series": f'accelerator_ecc_errors_total{{{ident},type="corrected"}}', "values": "0x40"},
                    {"series": f'accelerator_health{{{ident},subsystem="chip"}}', "values": "1x40"},
                    {"series": f"accelerator_up{{{ident}}}", "values": "1x40"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "30m",
                        "alertname": "AcceleratorTelemetryMissing",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "category": "hardware",
                                    "severity": "warning",
                                    "action": "none",
                                    "metric": C.TEMPERATURE,
                                    **dict(
                                        kv.replace('"', "").split("=")
                                        for kv in ident.split(",")
                                        if "job" not in kv
                                    ),
                                },
                                "exp_annotations": {
                                    "summary": f"{C.TEMPERATURE} missing on n device 0",
                                    "description": f"nvidia device 0 (m, u) on n answers but stopped reporting "
                                    f"{C.TEMPERATURE} (1 series seen in the last 1h, none now).",
                                    "runbook_url": "https://github.com/xpuwatch/xpuwatch/blob/main/docs/runbooks/"
                                    "AcceleratorTelemetryMissing.md",
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "absent_test.yml"
    path.write_text(yaml.safe_dump(test))
    res = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_alert_reading_a_device_family_is_found() -> None:
    """Spot checks against the generated files themselves (not the index)."""
    rules = Path("alerts/generated/rules.yml").read_text()
    for alert, fam in (
        ("AcceleratorTemperatureHigh", C.TEMPERATURE),
        ("AcceleratorLinkErrors", C.LINK_ERRORS),
        ("AcceleratorRowRemapFailed", C.REMAP_FAILED),
    ):
        assert re.search(rf"alert: {alert}\b", rules), alert
        readers = {r.name: r for r in parse(SHIPPED[0].read_text())}
        assert fam in readers[alert].families, alert


@pytest.mark.slow
def test_serve_logs_at_start_what_an_exclusion_leaves_blind(start_exporter: Callable[..., Exporter]) -> None:
    exp = start_exporter(
        "--simulate", "--sim-clock", "1700000000", "--no-collector." + C.TEMPERATURE, "--collector." + LINK
    )
    text = "\n".join(exp.log)
    assert f"{C.TEMPERATURE} is off; generated alert AcceleratorTemperatureHigh reads it" in text
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # /readyz: 503 until the first poll (late on a loaded machine)
        try:
            with urllib.request.urlopen(exp.url + "/readyz", timeout=10):
                break
        except urllib.error.HTTPError:
            time.sleep(0.1)
    with urllib.request.urlopen(exp.url + "/metrics", timeout=10) as resp:
        body = resp.read().decode()
    assert f"{C.TEMPERATURE}{{" not in body and f"# HELP {C.TEMPERATURE} " not in body
    links = [x for x in body.splitlines() if x.startswith(C.LINK_ERRORS + "{")]
    assert len(links) == 2 * 12 * 4 and all('link="' in x for x in links)  # two A100s, 12 NVLinks, 4 types
    (count,) = [x for x in body.splitlines() if x.startswith(C.RENDER_SERIES + " ")]
    # the process's own families (process_, python_, build info, the connection guard's xpuwatch_http_) are
    # not the render's
    written = [x for x in body.splitlines() if x and not x.startswith(("#", *VOLATILE_PREFIXES))]
    assert float(count.split()[1]) == len(written)


# ---------------------------------------------------------------------------------------------------------
# series budget


def test_default_series_per_device_stay_within_the_documented_budget() -> None:
    rows = budget.rows()
    assert {(r.vendor, r.mode) for r in rows} >= {
        ("nvidia", "whole card"),
        ("nvidia", "MIG"),
        ("nvidia", "vGPU"),
        ("amd", "whole card"),
        ("huawei", "whole card"),
    }
    over = [r for r in rows if r.default > r.budget]
    assert over == [], "series per device over budget (raise exporter/budget.py on purpose): " + str(over)
    for r in rows:
        assert r.default <= r.maximum
    doc = Path("docs/metrics.md").read_text()
    for r in rows:
        assert f"| {r.vendor} | {r.mode} | {r.devices} | {r.default} | {r.maximum} | {r.budget} |" in doc


def test_budget_counts_the_series_a_render_holds() -> None:
    """The per-device counts add up to the render's own xpuwatch_render_series, less the exporter's."""
    per = budget.per_device(Selection.default())
    assert per and all(n > 0 for _, _, n in per.values())
    nvidia_whole = [n for v, m, n in per.values() if (v, m) == ("nvidia", "whole card")]
    assert max(nvidia_whole) == budget.measure()[("nvidia", "whole card")][1]
    # the A100's 12 links x 4 types are 4 series by default, 48 with the breakdown on
    assert budget.measure(Selection())[("nvidia", "whole card")][1] - max(nvidia_whole) == 44
