"""A real Slurm (Debian's slurmctld + slurmd + munged on loopback, 4 stand-in GPU device nodes, started by
the project reference's slurm-up.sh) runs deploy/slurm/xpuwatch-jobmap.sh as its Prolog and Epilog, and a
job submitted by user nobody holds 2 of the 4 cards. The exporter (simulated 4-GPU node, job_mapping on the
prolog's folder) shows job_id/job_user/job_partition on exactly the cards Slurm gave the job, from the first
read of the folder after the prolog, and nothing once the epilog has run.

"From the first read after" is checked without timing: every /metrics body whose job-mapping read began after
the prolog's last write (xpuwatch_job_mapping_last_success_timestamp_seconds is when that read began; the
prolog's last write is the newest mtime of the mapping folders, which each rename updates) must show the job.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.ports import free_port
from xpuwatch.exporter import catalog as C

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent / "slurm"
SCRIPT = ROOT / "deploy" / "slurm" / "xpuwatch-jobmap.sh"
TOOLS = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "scancel", "scontrol", "setpriv")
MISSING = [t for t in TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
MARGIN = 0.1  # seconds: file times may lag the clock by a tick; reads this much after the write are judged

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"needs Debian's slurmctld, slurmd, slurm-client and munge (missing: {', '.join(MISSING)}); "
        "scripts/test.sh installs them",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="slurmd and the stand-in device nodes (mknod) need root"),
]


def _env(d: Path) -> dict[str, str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return {**os.environ, "SLURM_CONF": str(d / "etc" / "slurm.conf"), "PATH": path}


@pytest.fixture
def slurm() -> Iterator[Path]:
    """A one-node Slurm under a temporary folder with the shipped script as its Prolog and Epilog (the
    copy's MAP_DIR pointing at <folder>/jobs), stopped and removed afterwards. The folder is made directly
    under /tmp: munged refuses a socket folder whose path others cannot traverse (pytest's own tmp_path
    sits under a 0700 /tmp/pytest-of-<user>)."""
    d = Path(tempfile.mkdtemp(prefix="xpuwatch-slurm-", dir="/tmp"))
    env = {**_env(d), "CTLD_PORT": str(free_port()), "SLURMD_PORT": str(free_port())}
    up = subprocess.run(
        ["bash", str(HERE / "slurm-up.sh"), str(d)], env=env, capture_output=True, text=True, timeout=120
    )
    try:
        if up.returncode != 0:
            logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted((d / "log").glob("*")))
            pytest.fail(f"slurm-up.sh failed: {up.stderr}\n{logs}")
        hook = SCRIPT.read_text().replace(
            "MAP_DIR=${XPUWATCH_JOB_MAPPING_DIR:-/run/xpuwatch/jobs}",
            f"MAP_DIR=${{XPUWATCH_JOB_MAPPING_DIR:-{d / 'jobs'}}}",
        )
        assert str(d / "jobs") in hook
        for name in ("prolog.sh", "epilog.sh"):  # slurmd reads the hook files at each job
            (d / "etc" / name).write_text(hook)
        yield d
    finally:
        subprocess.run(
            ["bash", str(HERE / "slurm-down.sh"), str(d)], env=env, capture_output=True, timeout=120
        )
        for f in (d / "log").glob("*.bgpid"):  # a daemon slurm-down.sh could not stop: by its PID
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(f.read_text()), signal.SIGKILL)
        shutil.rmtree(d, ignore_errors=True)


def _slurm(d: Path, *args: str, user: str | None = None) -> str:
    cmd = (
        list(args) if user is None else ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *args]
    )
    r = subprocess.run(cmd, env=_env(d), cwd="/tmp", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{' '.join(args)}: {r.stderr}"
    return r.stdout


def _wait(pred: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _indices(spec: str) -> set[str]:
    """Slurm's ``IDX:0-1`` / ``IDX:0,2-3`` -> {"0", "1"}."""
    out: set[str] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(str(i) for i in range(int(lo), int(hi or lo) + 1))
    return out


def _written(mapdir: Path) -> float:
    """When the last prolog/epilog change landed: each rename or removal updates its folder's mtime."""
    return max(p.stat().st_mtime for p in (mapdir, mapdir / "jobs") if p.exists())


def _scrape(url: str) -> tuple[float, dict[str, dict[str, str]], list[dict[str, str]]]:
    """(when the job mapping read behind this body began, job labels by device index, allocated series)."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    read_at = 0.0
    jobs: dict[str, dict[str, str]] = {}
    allocated: list[dict[str, str]] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == C.JOB_MAPPING_LAST_SUCCESS:
                read_at = s.value
            elif s.name == C.UTILIZATION:
                jobs[s.labels["device"]] = {k: s.labels[k] for k in C.JOB_LABELS if k in s.labels}
            elif s.name == C.ALLOCATED:
                allocated.append(dict(s.labels))
    return read_at, jobs, allocated


def _judge(url: str, after: float, check: Callable[..., None], bodies: int = 3, timeout: float = 60) -> None:
    """Scrape until ``bodies`` bodies whose job-mapping read began after ``after`` (+ MARGIN) were seen, and
    ``check(jobs, allocated)`` each of them; earlier bodies are not judged."""
    deadline = time.monotonic() + timeout
    judged = 0
    while judged < bodies:
        assert time.monotonic() < deadline, f"no read of the job mapping after {after} within {timeout}s"
        read_at, jobs, allocated = _scrape(url)
        if read_at > after + MARGIN:
            judged += 1
            check(jobs, allocated)
        time.sleep(0.2)


def test_a_slurm_job_on_2_of_4_cards_is_on_exactly_those_cards_from_the_first_read(
    slurm: Path, tmp_path: Path
) -> None:
    mapdir = slurm / "jobs"
    (tmp_path / "sim.yaml").write_text(
        yaml.safe_dump(
            {
                "seed": 3,
                "node": "gpu-node-1",
                "poll_interval": 1,
                "devices": [{"vendor": "nvidia", "model": "NVIDIA A100-SXM4-80GB", "count": 4}],
                "timeline": [],
            }
        )
    )
    (tmp_path / "exporter.yaml").write_text(
        yaml.safe_dump({"job_mapping": {"dir": str(mapdir), "interval": 0.5}})
    )
    port = free_port()
    exporter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xpuwatch",
            "serve",
            "--simulate",
            f"--sim-config={tmp_path / 'sim.yaml'}",
            f"--config={tmp_path / 'exporter.yaml'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:

        def answers() -> bool:
            try:
                return len(_scrape(url)[1]) == 4
            except OSError:
                return False

        _wait(answers, "the exporter's 4 cards")
        out = _slurm(
            slurm,
            "sbatch",
            "--gres=gpu:2",
            "-o",
            "/dev/null",
            "-D",
            "/tmp",
            "--wrap",
            "sleep 120",
            user="nobody",
        )
        job = re.search(r"Submitted batch job (\d+)", out)
        assert job, out
        jid = job.group(1)
        _wait(lambda: (mapdir / "jobs" / jid).exists(), "the prolog's job file")
        shown = _slurm(slurm, "scontrol", "show", "job", "-d", jid)
        idx = re.search(r"GRES=gpu(?::\w+)?:2\(IDX:([0-9,-]+)\)", shown)
        assert idx, shown
        cards = _indices(idx.group(1))
        assert len(cards) == 2
        want = {"job_id": jid, "job_user": "nobody", "job_partition": "gpu"}

        def held(jobs: dict[str, dict[str, str]], allocated: list[dict[str, str]]) -> None:
            assert {dev for dev, labels in jobs.items() if labels} == cards
            assert all(jobs[dev] == want for dev in cards)
            assert sorted((a["device"], a["job_id"], a["owner"], a["workload_kind"]) for a in allocated) == [
                (dev, jid, "nobody", "job") for dev in sorted(cards)
            ]

        _judge(url, _written(mapdir), held)
        _slurm(slurm, "scancel", jid)
        _wait(lambda: not _slurm(slurm, "squeue", "-h").strip(), "the job and its epilog to end")
        assert not (mapdir / "jobs" / jid).exists() and not [p for p in mapdir.iterdir() if p.name.isdigit()]

        def released(jobs: dict[str, dict[str, str]], allocated: list[dict[str, str]]) -> None:
            assert not any(jobs.values()) and allocated == []

        _judge(url, _written(mapdir), released)
    finally:
        exporter.terminate()
        exporter.wait(10)
