"""Metric reference: renders docs/metrics.md from the catalog (a test fails when the committed file is stale)."""

from __future__ import annotations

from collections.abc import Iterable

from xpuwatch.exporter import budget
from xpuwatch.exporter.catalog import DEVICE_LABELS, JOB_LABELS, POD_LABELS, SLICE_LABELS, MetricDef, catalog
from xpuwatch.exporter.selection import breakdowns

_SCOPES = (
    (
        "device",
        "Device metrics",
        f"Labels on every series: `{', '.join(DEVICE_LABELS)}`, plus "
        f"`{', '.join(POD_LABELS)}` when exactly one container holds the device, "
        f"`{', '.join(JOB_LABELS)}` when exactly one Slurm job does.",
    ),
    (
        "slice",
        "Slice metrics (MIG instances, vGPU shares)",
        f"Labels on every series: `{', '.join(SLICE_LABELS)}` "
        f"(`uuid` is the parent device's), plus `{', '.join(POD_LABELS)}` of the slice's holder when one "
        f"container holds it (`{', '.join(JOB_LABELS)}` when one Slurm job does).",
    ),
    ("exporter", "Exporter self-metrics", "No identity labels."),
)


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render_markdown(defs: Iterable[MetricDef] | None = None) -> str:
    """The whole docs/metrics.md text."""
    defs = tuple(catalog() if defs is None else defs)
    out = [
        "# xpuwatch metric reference",
        "",
        "Generated from `exporter/catalog.py` by `xpuwatch metrics-doc -o docs/metrics.md`; do not edit by hand.",
        "Units are SI base units; a reading a vendor cannot give produces no series (never a fake 0).",
        "A device that does not answer exports only `accelerator_up 0`, `accelerator_info` and",
        "`accelerator_allocated`. A backend whose data is older than its staleness bound",
        "(default 2 x interval + timeout) exports no device series and `xpuwatch_backend_up 0`.",
        "",
        "Device label convention: `device` is the vendor-local index as the vendor's own tool prints it, so it",
        "can be typed back into that tool: `0` for `nvidia-smi -i 0` / `amd-smi -g 0` and the other GPU tools;",
        'Ascend chips are `"<NPU ID>-<Chip ID>"` (`npu-smi info -t common -i 6` chip 1 is `6-1`; a 910B with',
        "one chip per NPU labels NPU 3 as `3-0`). The simulated fleet (`--simulate`) labels its devices the same",
        "way. `uuid` is the vendor's stable id (Ascend: `ascend-<pci bus id>-<chip>`, npu-smi prints no chip id",
        "that survives a restart).",
        "",
    ]
    for scope, title, labels in _SCOPES:
        rows = [d for d in defs if d.scope == scope]
        if not rows:
            continue
        out += [
            f"## {title}",
            "",
            labels,
            "",
            "| name | type | unit | extra labels | help | source |",
            "|---|---|---|---|---|---|",
        ]
        for d in rows:
            extra = ", ".join(f"`{x}`" for x in d.labels)
            out.append(
                f"| `{d.name}` | {d.type} | {d.unit or '-'} | {extra or '-'} | {_cell(d.help)} | {_cell(d.source)} |"
            )
        out.append("")
    out += _selection_section()
    return "\n".join(out)


def _selection_section() -> list[str]:
    """Names for metric selection (exporter.selection), breakdowns, and the series budget per device."""
    out = [
        "## Metric selection",
        "",
        "Every family above can be switched off, and each breakdown below on or off on its own, as",
        "node_exporter's collectors are: `--no-collector.<name>` / `--collector.<name>` (and",
        "`--collector.disable-defaults`), config `metrics: {include: [...], exclude: [...], disable_defaults: false}`,",
        "env `XPUWATCH_METRICS_INCLUDE` / `XPUWATCH_METRICS_EXCLUDE` (comma-separated); see docs/exporter.md.",
        "`<name>` is a family name above or `<family>.<breakdown>`. A breakdown switched off keeps its family,",
        "one series per remaining label set, the values combined as the table says.",
        "",
        "| breakdown | labels dropped when off | combined by | default | why |",
        "|---|---|---|---|---|",
    ]
    for key, b in breakdowns().items():
        labels = ", ".join(f"`{x}`" for x in b.labels)
        out.append(
            f"| `{key}` | {labels} | {b.aggregate} | {'on' if b.default else 'off'} | {_cell(b.why)} |"
        )
    out += [
        "",
        "## Series budget per device",
        "",
        "Series carrying one device's `uuid` (its own, its slices', its allocation and container series; the",
        "`xpuwatch_*` self-metrics are per exporter) on the largest device of each vendor and mode in the",
        "default simulated fleet (`vendors/sim_default.yaml`, t=0, its pods attached): at the default selection,",
        "and the maximum with every breakdown on. The budget is the documented ceiling for the default",
        "(`exporter/budget.py`); `tests/exporter/test_selection.py` fails when a default exceeds it.",
        "`xpuwatch_render_series` reports what a live exporter's last render held.",
        "",
        "| vendor | mode | simulated devices | default series per device | maximum (every breakdown on) | budget |",
        "|---|---|---|---|---|---|",
    ]
    for r in budget.rows():
        out.append(f"| {r.vendor} | {r.mode} | {r.devices} | {r.default} | {r.maximum} | {r.budget} |")
    out += [
        "",
        f"A vendor and mode not listed has the budget {budget.DEFAULT_BUDGET} until its own is set.",
        "",
    ]
    return out
