"""Readings no working device can have, counted per device and reason (pure: DeviceSample -> counts).

Collector stage, beside the device series. A value the tool printed is exported as printed, never clamped,
swapped or dropped for being odd: mthreads-gmi on a host with a misconfigured IOMMU prints
``44302MiB(32768MiB)`` (used above the total it reports: the total is what is wrong, shared/fixtures
mthreads/mthreads-gmi_S4000_*), and hiding either number would hide that. Instead each such reading is counted
in ``xpuwatch_implausible_readings{reason}`` (one series per device and reason, only while the count is not
zero) and the poller logs each (device, reason) once.

Reasons (bounded label values):

- ``used_above_total``: memory used above memory total (the device's, or a slice's used above its limit);
- ``ratio_above_one``: a utilization or other share above 100 % (``*_ratio`` readings, slices included);
- ``negative_power``: power or power limit below 0 W;
- ``temperature_above_150c``: a temperature above 150 °C (silicon shuts down well below it: NVIDIA's
  shutdown threshold is ~90-105 °C, AMD's junction limit ~110 °C);
- ``negative_value``: memory bytes, energy or a clock below zero.

Readers that cannot tell a number at all (masked, garbage) report it in ``DeviceSample.unread`` instead; the
AMD/Hygon key readers (``vendors.amd.readings``) predate this check and still report a percentage above 100 or
a negative quantity as unread (``xpuwatch_backend_errors_total{reason="field"}``): the value is not exported
there, and ``inspect --explain`` names it.
"""

from __future__ import annotations

from xpuwatch.vendors.base import DeviceSample

MAX_CELSIUS = 150.0
REASONS = (
    "used_above_total",
    "ratio_above_one",
    "negative_power",
    "temperature_above_150c",
    "negative_value",
)

_RATIOS = (
    "utilization_ratio",
    "sm_active_ratio",
    "sm_occupancy_ratio",
    "tensor_active_ratio",
    "memory_bandwidth_utilization_ratio",
    "memory_used_ratio",
)
_SLICE_RATIOS = ("compute_limit_ratio", "utilization_ratio", "sm_active_ratio", "sm_occupancy_ratio")


def implausible(s: DeviceSample) -> tuple[tuple[str, int], ...]:
    """((reason, readings), ...) for one device, reasons in ``REASONS`` order, zero counts left out; () for a
    device that is down. Pure and cheap (a few comparisons per reading)."""
    if not s.up:
        return ()
    used, total = s.memory_used_bytes, s.memory_total_bytes
    above = int(used is not None and total is not None and used > total)
    ratios = sum(1 for f in _RATIOS if (v := getattr(s, f)) is not None and v > 1.0)
    power = sum(1 for v in (s.power_watts, s.power_limit_watts) if v is not None and v < 0)
    hot = sum(1 for v in s.temperatures_celsius.values() if v > MAX_CELSIUS)
    negative = sum(1 for v in (used, total, s.energy_joules) if v is not None and v < 0)
    negative += sum(1 for v in s.clocks_hertz.values() if v < 0)
    for sl in s.slices:
        u, t = sl.memory_used_bytes, sl.memory_total_bytes
        above += int(u is not None and t is not None and u > t)
        ratios += sum(1 for f in _SLICE_RATIOS if (v := getattr(sl, f)) is not None and v > 1.0)
        negative += sum(1 for v in (u, t) if v is not None and v < 0)
    if not (above or ratios or power or hot or negative):
        return ()
    counts = (above, ratios, power, hot, negative)
    return tuple((r, n) for r, n in zip(REASONS, counts, strict=True) if n)


def describe(s: DeviceSample, reason: str) -> str:
    """The readings behind one reason, as printed in the log line (``memory used 46454259712 B > total
    34359738368 B``)."""
    if reason == "used_above_total":
        return f"memory used {s.memory_used_bytes:.0f} B > total {s.memory_total_bytes:.0f} B"
    if reason == "ratio_above_one":
        got = {f: getattr(s, f) for f in _RATIOS if (getattr(s, f) or 0) > 1.0}
        return ", ".join(f"{f} {v:g}" for f, v in got.items()) or "a slice share above 1"
    if reason == "negative_power":
        return f"power {s.power_watts} W, limit {s.power_limit_watts} W"
    if reason == "temperature_above_150c":
        return ", ".join(f"{k} {v:g} C" for k, v in s.temperatures_celsius.items() if v > MAX_CELSIUS)
    return "a memory, energy or clock reading below zero"
