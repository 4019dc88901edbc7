"""The report's slice advice covers AMD compute partitions (issue 22): the two partition queries evaluated by
the real promtool on a DPX card's series, then ``figures`` on those answers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from xpuwatch.alerts.promapi import Series
from xpuwatch.alerts.spec import load_spec
from xpuwatch.report.baseline import Window, figures, queries

pytestmark = pytest.mark.skipif(
    not shutil.which("promtool"), reason="promtool (Debian prometheus) not installed"
)

CARD = 'job="xpuwatch",node="n1",vendor="amd",model="AMD Instinct MI300X"'
INFO = 'parent_uuid="pci-0000:05:00.0",compute_partition="DPX",memory_partition="NPS1"'


def _series() -> list[dict[str, str]]:
    out = []
    # partition 0: 95 % of its memory, 10 % busy (memory-bound); partition 1: 10 % memory, 2 % busy (oversized)
    for pid, used, util in ((0, 95, 0.1), (1, 10, 0.02)):
        dev = f'{CARD},device="{pid}",uuid="pci-0000:05:00.{pid}"'
        out += [
            {"series": f'accelerator_partition_info{{{dev},{INFO},partition_id="{pid}"}}', "values": "1x60"},
            {"series": f"accelerator_memory_used_bytes{{{dev}}}", "values": f"{used}x60"},
            {"series": f"accelerator_memory_total_bytes{{{dev}}}", "values": "100x60"},
            {"series": f"accelerator_utilization_ratio{{{dev}}}", "values": f"{util}x60"},
        ]
    # an unpartitioned card: no partition row
    nv = 'job="xpuwatch",node="n1",vendor="nvidia",model="A100",device="0",uuid="GPU-0"'
    out += [
        {"series": f"accelerator_memory_used_bytes{{{nv}}}", "values": "50x60"},
        {"series": f"accelerator_memory_total_bytes{{{nv}}}", "values": "100x60"},
        {"series": f"accelerator_utilization_ratio{{{nv}}}", "values": "0.5x60"},
    ]
    return out


def test_partition_queries_and_advice(tmp_path: Path) -> None:
    spec = load_spec()
    w = Window(end=3600, seconds=3600, step=60)
    exprs = {q.key: q.expr for q in queries(spec, w)}
    labels = '{{node="n1",device="{d}",parent_uuid="pci-0000:05:00.0",partition_id="{d}",compute_partition="DPX",memory_partition="NPS1"}}'
    test = {
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _series(),
                "promql_expr_test": [
                    {
                        "expr": exprs["part_mem"],
                        "eval_time": "59m",
                        "exp_samples": [
                            {"labels": labels.format(d=0), "value": 0.95},
                            {"labels": labels.format(d=1), "value": 0.1},
                        ],
                    },
                    {
                        "expr": exprs["part_compute"],
                        "eval_time": "59m",
                        "exp_samples": [
                            {"labels": labels.format(d=0), "value": 0.1},
                            {"labels": labels.format(d=1), "value": 0.02},
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "partitions_test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    run = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr

    def answer(d: int, v: float) -> Series:
        return Series(
            {
                "node": "n1",
                "device": str(d),
                "partition_id": str(d),
                "compute_partition": "DPX",
                "memory_partition": "NPS1",
            },
            ((3600.0, v),),
        )

    b = figures(
        {"part_mem": (answer(0, 0.95), answer(1, 0.1)), "part_compute": (answer(0, 0.1), answer(1, 0.02))},
        spec,
        w,
    )
    assert [(s.slice_id, s.profile, s.advice.split(":")[0]) for s in b.slices] == [
        ("partition 0", "DPX/NPS1", "memory-bound"),
        ("partition 1", "DPX/NPS1", "oversized"),
    ]
    assert "fewer, larger partitions" in b.slices[0].advice
