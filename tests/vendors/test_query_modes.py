"""The key-value query modes read from real captures (``efsmi -q``, mx-smi per-topic text, hy-smi key-value
text, a table pasted without its closing rule): each claimed by its own format only, damaged input raising
nothing but ParseError, and the parse cost per device measured."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.vendors.test_cn_tools import check_parse, mutated, read
from xpuwatch.vendors import enflame, hygon, metax, mthreads
from xpuwatch.vendors.base import DeviceSample, ParseError
from xpuwatch.vendors.registry import all_formats

MIB = 1 << 20
EFSMI_Q = "enflame/efsmi_-q_-d_S60x2_2024-2025_used-reserved-free.txt"
EFSMI_Q_OLD = "enflame/efsmi_-q_S60_drv1.2.4.12_1dev_zstack-docstring_excerpt.txt"
MX_QUERY = "metax/mx-smi_--show-temperature-usage-memory_MXN260x2_2.3.4.txt"
MX_QUERY_PROMPT = "metax/mx-smi_--show-temperature-usage-memory_MXN260x2_2.2.12_prompt.txt"
HY_TEXT = "hygon/hy-smi_showmemavailable_K100_AIx8_65438MiB_key-value.txt"
HY_USED = "hygon/hy-smi_showuse_showmeminfo_8hcu_used-only.txt"
GMI_JSON = "mthreads/mthreads-gmi_-q_json_S5000_drv3.3.5_2of8_excerpt.json"

OWN: dict[str, str] = {
    EFSMI_Q: "efsmi-query",
    EFSMI_Q_OLD: "efsmi-query",
    MX_QUERY: "mx-smi-query",
    HY_TEXT: "hy-smi-text",
    HY_USED: "hy-smi-text",
    GMI_JSON: "mthreads-gmi-json",
}
PARSERS: dict[str, Callable[[str], Sequence[DeviceSample]]] = {
    "efsmi-query": enflame.parse_query,
    "mx-smi-query": metax.parse_query,
    "hy-smi-text": hygon.parse_hy_smi_text,
    "mthreads-gmi-json": mthreads.parse_json,
}


@pytest.mark.parametrize("name", sorted(OWN))
def test_each_capture_is_claimed_by_its_own_format_only(name: str) -> None:
    text = read(name)
    assert [n for n, f in sorted(all_formats().items()) if f.sniff(text)] == [OWN[name]]


def test_efsmi_query_memory_used_is_what_the_table_lacks() -> None:
    a, b = enflame.parse_query(read(EFSMI_Q))
    assert (a.device.uuid, a.memory_used_bytes, a.memory_total_bytes) == (
        "0000:0c:00.0",
        24028 * MIB,
        42976 * MIB,
    )
    # the same GCU in the default table has the same uuid, so the two forms name one device
    table = enflame.parse(read("enflame/efsmi_S60_1.2.0.301.txt"))
    assert {s.device.uuid for s in table} == {"0000:01:00.0", "0000:09:00.0"}
    assert b.temperatures_celsius == {"core": 59.0} and not b.unread


def test_efsmi_query_garbled_values_cost_one_reading_each() -> None:
    text = read(EFSMI_Q_OLD).replace("Cur Power               : 102 W", "Cur Power               : xxx W")
    text = text.replace("Health                  : True", "Health                  : Maybe")
    (s,) = enflame.parse_query(text)
    assert s.power_watts is None and s.health == {} and s.power_limit_watts == 300.0
    assert set(s.unread) == {"power_watts", "health.device"}
    assert (
        enflame.parse_query(read(EFSMI_Q_OLD).replace("GCU Temp                : 41 C", "GCU Temp : N/A"))[
            0
        ].temperatures_celsius
        == {}
    )


def test_mx_smi_query_names_the_hotspot_sensor() -> None:
    a, b = metax.parse_query(read(MX_QUERY_PROMPT).split("\n", 1)[1])
    assert a.temperatures_celsius == {"hotspot": 38.0} and a.memory_used_bytes == 60917480 * 1024
    assert b.device.pci_bus_id == "0000:1a:00.0" and b.device.model == "MXN260"
    with pytest.raises(ParseError):
        metax.parse_query("mx-smi  version: 2.3.4\nEnd of Log\n")


@pytest.mark.parametrize("name", sorted(OWN))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_query_output_raises_nothing_but_parse_error(name: str, data: st.DataObject) -> None:
    check_parse(all_formats()[OWN[name]], data.draw(mutated(read(name))))


@pytest.mark.parametrize("fmt", sorted(PARSERS))
@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("DEV ID 0GPU#HCU[]:.%MiBKB C\n\t-abc"), max_size=300))
def test_arbitrary_text_raises_nothing_but_parse_error(fmt: str, text: str) -> None:
    check_parse(all_formats()[fmt], text)


def test_parse_cost_per_device() -> None:
    """Budget: well under a millisecond per device (a 64-device node read in a few ms per poll)."""
    for name, parse in (
        (EFSMI_Q, enflame.parse_query),
        (MX_QUERY, metax.parse_query),
        (HY_TEXT, hygon.parse_hy_smi_text),
        (GMI_JSON, mthreads.parse_json),
    ):
        text = read(name)
        n = len(parse(text))
        rounds = 200
        start = time.perf_counter()
        for _ in range(rounds):
            parse(text)
        per_device = (time.perf_counter() - start) / rounds / n
        assert per_device < 2e-3, (name, per_device)


def test_mthreads_json_reads_the_key_with_a_trailing_space() -> None:
    a, b = mthreads.parse_json(read(GMI_JSON))
    assert (a.power_watts, a.power_limit_watts, b.power_watts) == (96.66, 950.0, 97.09)
    assert a.device.pci_bus_id == "0000:2a:00.0" and b.device.pci_bus_id is None
    for bad in ("{", "[]", '{"GPU": {}}', '{"GPU": [{"Index": "x"}]}'):
        with pytest.raises(ParseError):
            mthreads.parse_json(bad)


def test_explain_lists_the_keys_not_read() -> None:
    unused = enflame.explain_query(read(EFSMI_Q))
    assert "device mem info/reserved size: no schema reading" in unused
    assert not any(
        line.startswith(("device mem info/used size", "temperature info/gcu temp")) for line in unused
    )
    assert metax.explain_query(read(MX_QUERY))[:2] == [
        "board temperature/drmos_soc: no schema reading",
        "board temperature/drmos_core: no schema reading",
    ]
