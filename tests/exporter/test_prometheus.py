"""A real Prometheus (Debian's `prometheus`) scrapes the simulated exporter and serves its values back."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter.conftest import GOLDEN_CLOCK, Exporter, wait_ready
from tests.ports import free_port

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "metrics.txt"


def query(base: str, q: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        doc = json.load(r)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


@pytest.mark.slow
def test_prometheus_scrapes_and_reads_back_utilization(
    start_exporter: Callable[..., Exporter], tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    assert binary, "Debian package prometheus is required"
    exp = start_exporter("--simulate", "--seed", "42", "--sim-clock", GOLDEN_CLOCK)
    wait_ready(exp)
    target = exp.url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: xpuwatch\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    prom = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        scrapes = 0.0
        while time.monotonic() < deadline:
            try:
                got = query(base, 'count_over_time(up{job="xpuwatch"}[10m])')
                scrapes = float(got[0]["value"][1]) if got else 0.0
                if scrapes >= 2:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert scrapes >= 2, "Prometheus did not scrape twice"
        assert query(base, 'up{job="xpuwatch"}')[0]["value"][1] == "1"
        res = query(base, 'accelerator_utilization_ratio{vendor="nvidia",device="1"}')
        assert len(res) == 1
        m = res[0]["metric"]
        assert (m["node"], m["model"], m["pod"], m["namespace"]) == (
            "sim-node-1",
            "NVIDIA A100-SXM4-80GB",
            "train-llm-0",
            "ml-team",
        )
        assert res[0]["value"][1] == "0.9783"  # the golden file's value for this device
        assert len(query(base, "accelerator_utilization_ratio")) == 17  # 18 devices, one MIG A100 without
        # Sums over a MIG node never double-count: device-wide series exist once per physical GPU, and the
        # slices of the MIG A100 add up to its own framebuffer reading.
        mig = "GPU-c1419565-95bd-718b-5f3b-9f644ffec4c8"
        assert query(base, f'count(accelerator_power_watts{{uuid="{mig}"}})')[0]["value"][1] == "1"
        assert (
            query(base, f'count(accelerator_temperature_celsius{{uuid="{mig}",sensor="core"}})')[0]["value"][
                1
            ]
            == "1"
        )
        device_used = query(base, f'accelerator_memory_used_bytes{{uuid="{mig}"}}')[0]["value"][1]
        slices_used = query(base, f'sum(accelerator_slice_memory_used_bytes{{uuid="{mig}"}})')[0]["value"][1]
        assert float(slices_used) == float(device_used) > 0
        golden_power = sum(
            f.samples[0].value if len(f.samples) == 1 else sum(x.value for x in f.samples)
            for f in text_string_to_metric_families(GOLDEN.read_text())
            if f.name == "accelerator_power_watts"
        )
        node_power = float(query(base, 'sum(accelerator_power_watts{node="sim-node-1"})')[0]["value"][1])
        assert node_power == pytest.approx(golden_power)
    finally:
        prom.terminate()
        try:
            prom.wait(20)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
