"""The default simulated fleet exercises the whole catalog: every family `exporter.catalog.catalog()` lists
at test time (core families, and every vendor-only family a backend registers) appears in the /metrics of
the default scenario, so the demo and the dashboards never show an empty panel for a shipped metric.

When this fails after adding a family to the catalog, teach vendors/sim.py to emit it (a reading of a
simulated model, or a vendor-only metric in ``vendors.sim.EXTRAS``) and regenerate tests/golden/metrics.txt.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from xpuwatch.exporter import catalog as C
from xpuwatch.exporter.catalog import catalog
from xpuwatch.exporter.cli import Clocks, assemble
from xpuwatch.exporter.settings import BackendSettings, Settings
from xpuwatch.vendors.command import SubprocessRunner

CLOCK = Clocks(lambda: 1_700_000_000.0, lambda: 0.0)


def _default_fleet_metrics() -> dict[str, list[tuple[dict[str, str], float]]]:
    settings = Settings(backends={"sim": BackendSettings()})
    asm = assemble(settings, ["sim"], CLOCK, SubprocessRunner(), None, {})
    asm.poller.pollers[0].poll_once()
    text = asm.cache.get("", "").body.decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(fam.name, []).append((s.labels, s.value))
    return out


def _family(name: str, type_: str) -> str:
    # prometheus-client's parser names counter families without _total and info families without _info.
    if type_ == "counter" and name.endswith("_total"):
        return name[: -len("_total")]
    return name


# The Slurm job mapping's self-metrics exist only where job_mapping.dir is set: the simulated node is a
# Kubernetes node (its holders are pods), no dashboard panel reads them, and tests/exporter/test_jobmap.py and
# tests/deploy/test_slurm_live.py render them.
ONLY_WITH_A_JOB_MAPPING = {C.JOB_MAPPING_UP, C.JOB_MAPPING_LAST_SUCCESS, C.JOB_MAPPING_UNMATCHED}


def test_default_sim_fleet_emits_every_catalog_family() -> None:
    got = _default_fleet_metrics()
    missing = sorted(
        m.name
        for m in catalog()
        if _family(m.name, m.type) not in got and m.name not in ONLY_WITH_A_JOB_MAPPING
    )
    assert missing == [], f"catalog families the default simulated fleet never emits: {missing}"


def test_per_container_memory_on_shared_devices_sums_to_what_the_holders_use() -> None:
    got = _default_fleet_metrics()
    per = {
        (lab["vendor"], lab["device"], lab["pod"], lab["container"]): v
        for lab, v in got["accelerator_container_memory_used_bytes"]
    }
    # The RTX 4090 shared by two HAMi vGPU shares: one process per share, each holding its share's memory.
    shares = {
        lab["slice_id"]: v for lab, v in got["accelerator_slice_memory_used_bytes"] if lab["device"] == "3"
    }
    assert per[("nvidia", "3", "ocr-api-5d8f7-9qz2m", "ocr")] == shares["0"]
    assert per[("nvidia", "3", "ocr-batch-27xkq", "worker")] == shares["1"]
    # Two containers of one pod on one Ascend chip: the server holds twice what its warm-up sidecar holds.
    server = per[("huawei", "1-0", "chat-svc-6b7d9-lp2xv", "server")]
    warmup = per[("huawei", "1-0", "chat-svc-6b7d9-lp2xv", "warmup")]
    assert abs(server - 2 * warmup) <= 2**20
    chip = {lab["device"]: v for lab, v in got["accelerator_memory_used_bytes"] if lab["vendor"] == "huawei"}
    assert abs(server + warmup - chip["1-0"]) <= 2**20
    # Every container memory series is named: none falls under container="" in the simulation.
    assert all(c for (_v, _d, _p, c) in per)


def test_domestic_cards_report_as_their_tools_do() -> None:
    got = _default_fleet_metrics()

    def vendors(name: str) -> set[str]:
        return {lab["vendor"] for lab, _ in got.get(name, [])}

    # hy-smi gives a VRAM percentage and no bytes; the tools of the domestic cards print power, no energy.
    assert vendors("accelerator_memory_used_ratio") == {"hygon"}
    assert "hygon" not in vendors("accelerator_memory_used_bytes")
    assert vendors("accelerator_energy_joules") == {"nvidia", "amd", "huawei"}
    assert {"hygon", "cambricon", "enflame", "kunlunxin"} <= vendors("accelerator_power_watts")
    mapping = {lab["resource"]: v for lab, v in got["xpuwatch_pod_mapping_unmatched_ids"]}
    assert mapping["nvidia.com/gpu"] == 0 and mapping["hygon.com/dcu"] == 0
    assert [v for _, v in got["xpuwatch_pod_mapping_last_success_timestamp_seconds"]] == [1_700_000_000.0]
