"""AMD GPUs (Instinct, Radeon) into DeviceSamples: the amdsmi library, else amd-smi or rocm-smi JSON.

Vendor layer, one package with one registration (``backend.SPEC``); one module per source:
``amdsmi_library`` (the ``amdsmi`` Python package), ``amd_smi_json`` (``amd-smi metric|static --json``),
``amd_smi_monitor`` (``amd-smi monitor`` text), ``amd_smi_table`` (the default ``amd-smi`` dashboard)
and ``rocm_smi_table`` (plain ``rocm-smi``), both for ``inspect`` only, ``partitions`` (MI300 compute
partitions tied to their card), ``rocm_smi_json`` (``rocm-smi --json``, AMD's and the Hygon DTK fork's), ``readings`` (units, "N/A" markers, device ids) and ``backend`` (source choice, tool
runs, detection, registration). ``AmdBackend`` tries, in order (``options["source"]`` pins one):

1. the ``amdsmi`` Python package (ROCm ``py-interface``: ``amdsmi_interface.py``), read per call;
2. ``amd-smi metric --json`` each poll plus ``amd-smi static --json`` for identity, memory size and power cap;
3. ``rocm-smi ... --json`` (deprecated by AMD, still the only tool on older hosts; ``ROCM_SMI_ARGS``,
   falling back to ``ROCM_SMI_MINIMAL_ARGS`` if the tool refuses a flag).

Every number is converted to base units by reading its unit (amd-smi ``{"value", "unit"}`` pairs, the
``(B)``/``(MiB)``/``(uJ)`` suffix of rocm-smi keys). AMD's "MB" is 2**20 bytes: ``amd_smi.cc`` divides
bytes by 1024*1024 (ROCm/amdsmi ``src/amd_smi/amd_smi.cc``, ``amdsmi_get_gpu_vram_usage``). Anything
"N/A" (a bare "N/A", "N/A (Secondary die)", a whole "N/A" section) becomes ``None``: never a made-up 0.
A value that is printed but cannot be read (garbage, unknown unit, out of range) drops that one reading
and is named in ``DeviceSample.unread``; the device stays up.

Device identity. ``uuid`` is the ASIC's unique id (amdsmi ``asic_info["asic_serial"]``, amd-smi static
``asic.asic_serial``, rocm-smi ``Unique ID``: the same 64-bit value in all three), written ``0x%016x``;
when it is absent or all zero: the board serial; else ``pci-<bdf>``; else ``amd-index-<n>`` (stable only
while enumeration order is). An MI250X's two GCDs are two devices (two amd-smi entries, two rocm-smi
cards); the secondary GCD reports power as "N/A (Secondary die)" and the primary reports the package.
"""

from __future__ import annotations

from xpuwatch.vendors.amd.amd_smi_json import (
    Identity,
    amd_smi_entries,
    amd_smi_sample,
    parse_amd_smi_metric,
    parse_amd_smi_static,
    parse_amd_smi_static_samples,
    sniff_amd_smi_json,
    sniff_amd_smi_static_json,
)
from xpuwatch.vendors.amd.amd_smi_monitor import parse_amd_smi_monitor, sniff_amd_smi_monitor
from xpuwatch.vendors.amd.amd_smi_process import (
    GpuProcesses,
    parse_amd_smi_process,
    parse_amd_smi_process_samples,
    process_memory,
    sniff_amd_smi_process_json,
)
from xpuwatch.vendors.amd.amd_smi_table import parse_amd_smi_table, sniff_amd_smi_table
from xpuwatch.vendors.amd.amdsmi_library import AmdSmiLibrary
from xpuwatch.vendors.amd.backend import (
    AMD_SMI_METRIC,
    AMD_SMI_STATIC,
    FORMATS,
    ROCM_SMI_ARGS,
    ROCM_SMI_MINIMAL_ARGS,
    SPEC,
    STATIC_REFRESH_POLLS,
    AmdBackend,
    FlagFallback,
    LostTracker,
    detect,
)
from xpuwatch.vendors.amd.readings import (
    ECC_DEFERRED,
    UNKNOWN_MODEL,
    VENDOR,
    Notes,
    amount,
    count,
    device_uuid,
    is_na,
    load_json,
    nonneg,
    printed,
    quantity,
    ratio,
    scaled,
    text,
    with_notes,
)
from xpuwatch.vendors.amd.rocm_smi_json import (
    hygon_card,
    hygon_markers,
    parse_rocm_smi_json,
    rocm_smi_cards,
    rocm_smi_driver,
    rocm_smi_sample,
    sniff_rocm_smi_json,
)
from xpuwatch.vendors.amd.rocm_smi_table import parse_rocm_smi_table, sniff_rocm_smi_table

__all__ = [
    "AMD_SMI_METRIC",
    "AMD_SMI_STATIC",
    "ECC_DEFERRED",
    "FORMATS",
    "ROCM_SMI_ARGS",
    "ROCM_SMI_MINIMAL_ARGS",
    "SPEC",
    "STATIC_REFRESH_POLLS",
    "UNKNOWN_MODEL",
    "VENDOR",
    "AmdBackend",
    "AmdSmiLibrary",
    "FlagFallback",
    "GpuProcesses",
    "Identity",
    "LostTracker",
    "Notes",
    "amd_smi_entries",
    "amd_smi_sample",
    "amount",
    "count",
    "detect",
    "device_uuid",
    "hygon_card",
    "hygon_markers",
    "is_na",
    "load_json",
    "nonneg",
    "parse_amd_smi_metric",
    "parse_amd_smi_monitor",
    "parse_amd_smi_process",
    "parse_amd_smi_process_samples",
    "parse_amd_smi_static",
    "parse_amd_smi_static_samples",
    "parse_amd_smi_table",
    "parse_rocm_smi_json",
    "parse_rocm_smi_table",
    "printed",
    "process_memory",
    "quantity",
    "ratio",
    "rocm_smi_cards",
    "rocm_smi_driver",
    "rocm_smi_sample",
    "scaled",
    "sniff_amd_smi_json",
    "sniff_amd_smi_monitor",
    "sniff_amd_smi_process_json",
    "sniff_amd_smi_static_json",
    "sniff_amd_smi_table",
    "sniff_rocm_smi_json",
    "sniff_rocm_smi_table",
    "text",
    "with_notes",
]
