"""The baseline report of a Slurm node: two days of an exporter with job_mapping (cards labelled job_id,
job_user, job_partition as exporter/jobmap.py labels them, no namespace or pod) backfilled into a real
Prometheus; the hoarder and chargeback tables list the jobs' partitions and users.

The node (4 A100s): card 0 trains for alice (partition gpu), card 1 is held idle with memory all the time by
bob (gpu), card 2 idle with memory by carol (debug) for the second day only, card 3 is free."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.report.backfill import served
from xpuwatch.alerts.promapi import Prometheus
from xpuwatch.alerts.spec import load_spec
from xpuwatch.exporter import catalog as C
from xpuwatch.report import chargeback
from xpuwatch.report.baseline import Window, collect, figures

STEP = 900
RANGE = 2 * 86400
END = int(time.time()) // STEP * STEP
START = END - RANGE + STEP
TIMES = range(START, END + 1, STEP)
GIB = 1024.0**3
HALF = START + 86400  # carol's job starts here
# card -> (job id, user, partition, utilization, memory used, held from)
JOBS = {
    0: ("101", "alice", "gpu", 0.8, 60 * GIB, START),
    1: ("102", "bob", "gpu", 0.01, 40 * GIB, START),
    2: ("103", "carol", "debug", 0.0, 20 * GIB, HALF),
}


def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


def openmetrics() -> Iterator[str]:
    base = {"job": "xpuwatch", "instance": "gpu-node-1:9851", "node": "gpu-node-1", "vendor": "nvidia"}

    def ident(card: int) -> dict[str, str]:
        return {**base, "model": "NVIDIA A100-SXM4-80GB", "device": str(card), "uuid": f"GPU-{card}"}

    def held(card: int, t: int) -> bool:
        return card in JOBS and t >= JOBS[card][5]

    def util(card: int, t: int) -> float:
        return JOBS[card][3] if held(card, t) else 0.0

    def used(card: int, t: int) -> float:
        return JOBS[card][4] if held(card, t) else 0.0

    gauges = (
        (C.UP, lambda card, t: 1.0),
        (C.UTILIZATION, util),
        (C.MEMORY_USED, used),
        (C.MEMORY_TOTAL, lambda card, t: 80 * GIB),
        (C.POWER, lambda card, t: 60.0 + 340.0 * util(card, t)),
    )
    for name, value in gauges:
        yield f"# TYPE {name} gauge"
        for card in range(4):
            for t in TIMES:
                yield f"{name}{_labels(**ident(card))} {value(card, t)!r} {t}"
    yield f"# TYPE {C.ALLOCATED} gauge"
    for card, (jid, user, partition, *_rest) in JOBS.items():
        labels = _labels(
            **ident(card),
            namespace="",
            pod="",
            container="",
            workload_kind="job",
            owner=user,
            job_id=jid,
            job_user=user,
            job_partition=partition,
        )
        for t in TIMES:
            if held(card, t):
                yield f"{C.ALLOCATED}{labels} 1.0 {t}"
    yield "# EOF"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(tmp_path_factory.mktemp("slurm"), openmetrics()) as url:
        yield url


def _steps(card: int) -> int:
    return sum(1 for t in TIMES if t >= JOBS[card][5])


@pytest.mark.slow
def test_hoarders_and_chargeback_list_slurm_partitions_and_users(prometheus: str, tmp_path: Path) -> None:
    spec = load_spec()
    w = Window(end=END, seconds=RANGE, step=STEP)
    b = figures(collect(Prometheus(prometheus), spec, w), spec, w)
    hours = STEP / 3600
    # hoarders: memory held with compute near 0, by partition and user; alice's busy card is not one
    assert [(h.namespace, h.owner) for h in b.hoarders] == [("gpu", "bob"), ("debug", "carol")]
    assert [h.device_hours for h in b.hoarders] == pytest.approx([_steps(1) * hours, _steps(2) * hours])
    assert b.hoarders[0].memory_gib_hours == pytest.approx(_steps(1) * hours * 40)
    # chargeback: every held card-hour, per partition and user
    usage = {
        (u.namespace, u.owner, what): v
        for u in b.usage
        for what, v in (("held", u.device_hours), ("idle", u.idle_hours))
    }
    assert usage == pytest.approx(
        {
            ("gpu", "alice", "held"): _steps(0) * hours,
            ("gpu", "alice", "idle"): 0.0,
            ("gpu", "bob", "held"): _steps(1) * hours,
            ("gpu", "bob", "idle"): _steps(1) * hours,
            ("debug", "carol", "held"): _steps(2) * hours,
            ("debug", "carol", "idle"): _steps(2) * hours,
        }
    )
    teams = chargeback.by_team(b.usage)
    assert [(t.namespace, t.owner) for t in teams] == [("gpu", "alice"), ("gpu", "bob"), ("debug", "carol")]

    out = tmp_path / "report.html"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "xpuwatch",
            "report",
            "--prometheus",
            prometheus,
            "--range",
            "2d",
            "--step",
            "15m",
            "--end",
            str(END),
            "--csv",
            str(tmp_path / "csv"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    page = out.read_text()
    hoard = page[page.index('<table id="hoarders">') :]
    hoard = hoard[: hoard.index("</table>")]
    assert "<th>namespace / partition</th><th>owner / user</th>" in hoard
    assert "<td>gpu</td><td>bob</td>" in hoard and "<td>debug</td><td>carol</td>" in hoard
    assert "alice" not in hoard
    with (tmp_path / "csv" / "usage_by_team.csv").open() as f:
        rows = {(r["namespace"], r["owner"]): float(r["device_hours"]) for r in csv.DictReader(f)}
    assert rows == pytest.approx(
        {
            ("gpu", "alice"): _steps(0) * hours,
            ("gpu", "bob"): _steps(1) * hours,
            ("debug", "carol"): _steps(2) * hours,
        },
        abs=1e-3,
    )
