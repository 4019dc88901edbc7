"""What the nvidia-smi readers share (``-q -x`` XML, ``--query-gpu`` CSV, the plain table): the NVIDIA-only
metrics they fill, the reading of a P-state, and MIG profile names derived from what nvidia-smi prints.

Vendor layer, below ``vendors.nvidia_smi`` and ``vendors.nvidia_smi_table`` (which register and use it); it
imports nothing from them, so the two readers share it without an import circle.
"""

from __future__ import annotations

import re

from xpuwatch.vendors.base import VendorMetric

VENDOR = "nvidia"

MIG_MODE = "accelerator_nvidia_mig_mode"
FAN_SPEED = "accelerator_nvidia_fan_speed_ratio"
PERFORMANCE_STATE = "accelerator_nvidia_performance_state"
PERSISTENCE_MODE = "accelerator_nvidia_persistence_mode"

MIG_MODE_METRIC = VendorMetric(
    name=MIG_MODE,
    type="gauge",
    unit="",
    help="1 when MIG mode is enabled on the GPU (current mode), 0 when disabled.",
    source="NVML nvmlDeviceGetMigMode current; nvidia-smi mig_mode/current_mig, mig.mode.current, "
    "plain table MIG M.",
)
FAN_SPEED_METRIC = VendorMetric(
    name=FAN_SPEED,
    type="gauge",
    unit="ratio",
    help="Fan speed the driver reports as a share of the fan's maximum (0..1); no series on passively cooled "
    "boards, which print N/A.",
    source="nvidia-smi fan_speed (XML), fan.speed (CSV), plain table Fan (%)",
)
PERFORMANCE_STATE_METRIC = VendorMetric(
    name=PERFORMANCE_STATE,
    type="gauge",
    unit="",
    help="Performance state of the GPU as its number: 0 (P0, maximum performance) to 15 (P15, minimum).",
    source="nvidia-smi performance_state (XML), pstate (CSV), plain table Perf (P0..P15)",
)
PERSISTENCE_MODE_METRIC = VendorMetric(
    name=PERSISTENCE_MODE,
    type="gauge",
    unit="",
    help="1 when the driver's persistence mode is enabled on the GPU (Linux), 0 when disabled.",
    source="nvidia-smi persistence_mode (XML, CSV), plain table Persistence-M (On/Off)",
)
METRICS = (MIG_MODE_METRIC, FAN_SPEED_METRIC, PERFORMANCE_STATE_METRIC, PERSISTENCE_MODE_METRIC)

_PSTATE = re.compile(r"P([0-9]|1[0-5])")


def performance_state(text: str | None) -> float | None:
    """``"P8"`` -> 8.0; anything else (``N/A``, ``Unknown``, ``P32``) -> None."""
    m = _PSTATE.fullmatch((text or "").strip())
    return float(m.group(1)) if m else None


# Streaming multiprocessors per MIG compute slice, by product (NVIDIA MIG User Guide, "Supported MIG
# Profiles"): nvidia-smi -q -x and the plain table have no profile name, so it is derived from SM count and
# memory share.
_SMS_PER_GPC_SLICE: tuple[tuple[str, int], ...] = (
    ("A100", 14),
    ("A30", 14),
    ("H100", 16),
    ("H200", 16),
    ("H800", 16),
)


def mig_profile_name(
    model: str,
    sms: int | None,
    total_mib: float | None,
    parent_total_mib: float | None,
    instance_sms: int | None = None,
) -> str:
    """Derive a MIG profile name (``"1g.20gb"``) from what nvidia-smi shows of an instance.

    Compute slices = SMs / SMs-per-slice of the product (MIG User Guide tables); memory = the instance's
    share of eight memory slices of the board's nominal size (the ``80GB`` in the product name, else its
    total rounded to GiB). ``instance_sms``: the SMs of the whole GPU instance when several compute
    instances share it (the plain table lists each); the compute instance then takes the ``<c>c.`` prefix
    ``nvidia-smi -L`` prints (``1c.2g.10gb``). Returns ``"unknown"`` when the product is not in the table: a
    wrong name would be worse than none. NVML gives the real name (vendors.nvml).
    """
    per_slice = next((n for key, n in _SMS_PER_GPC_SLICE if key in model), None)
    if not per_slice or not sms or not total_mib or not parent_total_mib or parent_total_mib <= 0:
        return "unknown"
    c = max(1, round(sms / per_slice))
    g = max(c, round((instance_sms or sms) / per_slice))
    m = re.search(r"(\d+)\s*GB", model)
    nominal_gb = int(m.group(1)) if m else round(parent_total_mib / 1024)
    mem_slices = max(1, round(total_mib / (parent_total_mib / 8)))
    prefix = f"{c}c." if c < g else ""
    return f"{prefix}{g}g.{round(nominal_gb * mem_slices / 8)}gb"
