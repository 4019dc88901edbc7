"""deploy/slurm/xpuwatch-jobmap.sh run as slurmd runs a Prolog and an Epilog: with exactly the environment
the project's real Slurm gave them (shared/reference/slurm-local.md section 4: no PATH, HOME or USER; the GPU
variables; SLURM_SCRIPT_CONTEXT), under /bin/sh (dash on Debian), and read back by the exporter's own reader.
The real Slurm run is tests/deploy/test_slurm_live.py."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from xpuwatch.exporter.attribution import Holder
from xpuwatch.exporter.jobmap import JobInfo, read_dir, resolve
from xpuwatch.exporter.podmap import DeviceRef

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "slurm" / "xpuwatch-jobmap.sh"


def hook_env(
    context: str, job: int, gpus: str | None = "0,1", user: str = "root", **extra: str
) -> dict[str, str]:
    """The Prolog's (``prolog``) or Epilog's environment as slurmd 22.05 gave it (reference section 4),
    for job ``job`` holding ``gpus`` (None: a job without --gres)."""
    uid = "0" if user == "root" else "65534"
    env = {
        "PWD": "/",
        "SLURMD_NODENAME": "localhost",
        "SLURM_CLUSTER_NAME": "testcluster",
        "SLURM_JOBID": str(job),
        "SLURM_JOB_CPUS_PER_NODE": "1",
        "SLURM_JOB_GID": uid,
        "SLURM_JOB_ID": str(job),
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_JOB_RESTART_COUNT": "0",
        "SLURM_JOB_UID": uid,
        "SLURM_JOB_USER": user,
        "SLURM_JOB_WORK_DIR": "/tmp",
        "SLURM_NODELIST": "localhost",
        "SLURM_SCRIPT_CONTEXT": f"{context}_slurmd",
        "SLURM_UID": uid,
    }
    if gpus is not None:
        for var in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "SLURM_JOB_GPUS"):
            env[var] = gpus
        env["ZE_AFFINITY_MASK"] = gpus
    if context == "epilog":
        env.update(SLURM_JOB_DERIVED_EC="0", SLURM_JOB_EXIT_CODE2="0:0", SLURM_JOB_EXIT_CODE="0")
    return {**env, **extra}


def run(mapdir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # The one variable beyond Slurm's: where this test's map lives (the script's MAP_DIR default otherwise).
    return subprocess.run(
        ["/bin/sh", str(SCRIPT), *args],
        env={**env, "XPUWATCH_JOB_MAPPING_DIR": str(mapdir)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def files(mapdir: Path) -> dict[str, str]:
    """Every file under ``mapdir`` but the lock, by relative path."""
    return {
        str(p.relative_to(mapdir)): p.read_text()
        for p in sorted(mapdir.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


GPUS = [DeviceRef("nvidia", f"GPU-{i}", str(i)) for i in range(4)]


def test_prolog_writes_dcgm_exporters_format_and_the_epilog_clears_it(tmp_path: Path) -> None:
    m = tmp_path / "run" / "xpuwatch" / "jobs"  # created by the prolog, parents included
    r = run(m, hook_env("prolog", 1, "0,1", "nobody"))
    assert r.returncode == 0 and r.stderr == ""
    assert files(m) == {"0": "1\n", "1": "1\n", "jobs/1": "user=nobody\npartition=gpu\n"}
    assert (m.stat().st_mode & 0o777, (m / "0").stat().st_mode & 0o777) == (0o755, 0o644)
    attribution, unmatched = resolve(read_dir(str(m)), GPUS)
    job = Holder.batch_job("1", "nobody", "gpu")
    assert unmatched == () and [attribution.for_device(g.uuid) for g in GPUS] == [(job,), (job,), (), ()]
    r = run(m, hook_env("epilog", 1, "0,1", "nobody"))
    assert r.returncode == 0 and r.stderr == "" and files(m) == {}


def test_a_second_job_gets_the_other_cards_and_each_epilog_removes_only_its_own(tmp_path: Path) -> None:
    run(tmp_path, hook_env("prolog", 1, "0,1"))
    run(tmp_path, hook_env("prolog", 2, "2,3", "nobody"))
    run(tmp_path, hook_env("epilog", 1, "0,1"))
    assert files(tmp_path) == {"2": "2\n", "3": "2\n", "jobs/2": "user=nobody\npartition=gpu\n"}


def test_jobs_sharing_a_card_keep_each_others_line(tmp_path: Path) -> None:
    """Shards or MPS: two jobs on GPU 0. The first epilog must not take the second job's line with it."""
    run(tmp_path, hook_env("prolog", 7, "0"))
    run(tmp_path, hook_env("prolog", 8, "0"))
    run(tmp_path, hook_env("prolog", 8, "0"))  # a repeated prolog (requeue) adds no second line
    assert files(tmp_path)["0"] == "7\n8\n"
    run(tmp_path, hook_env("epilog", 7, "0"))
    assert files(tmp_path)["0"] == "8\n"
    assert read_dir(str(tmp_path)).devices == (("0", ("8",)),)


def test_the_epilog_finds_the_job_without_device_variables(tmp_path: Path) -> None:
    run(tmp_path, hook_env("prolog", 3, "1,2"))
    run(tmp_path, hook_env("epilog", 3, None))
    assert files(tmp_path) == {}


@pytest.mark.parametrize("var", ["ROCR_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES"])
def test_vendor_visible_devices_variables_are_read_when_slurm_sets_no_gpu_variable(
    tmp_path: Path, var: str
) -> None:
    r = run(tmp_path, hook_env("prolog", 4, None, **{var: "2,3"}))
    assert r.returncode == 0 and set(files(tmp_path)) == {"2", "3", "jobs/4"}


def test_the_first_variable_set_wins(tmp_path: Path) -> None:
    env = hook_env("prolog", 5, "1") | {"CUDA_VISIBLE_DEVICES": "3"}  # SLURM_JOB_GPUS comes first
    run(tmp_path, env)
    assert set(files(tmp_path)) == {"1", "jobs/5"}


def test_a_job_without_accelerators_records_nothing(tmp_path: Path) -> None:
    r = run(tmp_path, hook_env("prolog", 6, None))
    assert r.returncode == 0 and files(tmp_path) == {}


def test_bad_input_is_logged_and_never_fails_the_hook(tmp_path: Path) -> None:
    """A Prolog that exits non-zero drains the node: every problem exits 0 with a message."""
    cases = [
        ({**hook_env("prolog", 9), "SLURM_JOB_ID": "../../etc"}, "is not one"),
        (hook_env("prolog", 9, "GPU-8a3f,1"), "'GPU-8a3f' is not an index"),
        ({k: v for k, v in hook_env("prolog", 9).items() if k != "SLURM_SCRIPT_CONTEXT"}, "neither"),
    ]
    for env, said in cases:
        r = run(tmp_path, env)
        assert r.returncode == 0 and said in r.stderr, (env, r.stderr)
    assert files(tmp_path) == {"1": "9\n", "jobs/9": "user=root\npartition=gpu\n"}  # the index that was one
    locked = tmp_path / "odd"
    (locked / ".lock").mkdir(parents=True)  # the lock cannot be opened: recorded anyway, and said so
    r = run(locked, hook_env("prolog", 12, "2"))
    assert (
        r.returncode == 0
        and "without the lock" in r.stderr
        and files(locked)
        == {
            "2": "12\n",
            "jobs/12": "user=root\npartition=gpu\n",
        }
    )
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    r = run(blocked / "jobs", hook_env("prolog", 10))  # MAP_DIR under a regular file: cannot be made
    assert r.returncode == 0 and "cannot create" in r.stderr


def test_odd_user_and_partition_names_become_one_word(tmp_path: Path) -> None:
    run(tmp_path, hook_env("prolog", 11, "0", "root") | {"SLURM_JOB_PARTITION": "gpu a\nuser=evil"})
    assert files(tmp_path)["jobs/11"] == "user=root\npartition=gpuauser=evil\n"
    assert dict(read_dir(str(tmp_path)).jobs) == {"11": JobInfo("root", "gpuauser=evil")}


@pytest.mark.slow
def test_concurrent_prologs_and_epilogs_lose_no_line(tmp_path: Path) -> None:
    """Twenty jobs on overlapping cards, their prologs started together, then the epilogs of half of them
    together with the prologs of ten more: what is left is exactly the jobs still running, on their cards."""
    rng = random.Random(7)
    cards = {job: ",".join(sorted(rng.sample("0123", rng.randint(1, 3)))) for job in range(1, 31)}

    def start(context: str, job: int) -> subprocess.Popen[str]:
        env = {**hook_env(context, job, cards[job]), "XPUWATCH_JOB_MAPPING_DIR": str(tmp_path)}
        return subprocess.Popen(["/bin/sh", str(SCRIPT)], env=env, text=True, stderr=subprocess.PIPE)

    def wait(procs: list[subprocess.Popen[str]]) -> None:
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0 and not err, err

    wait([start("prolog", j) for j in range(1, 21)])
    ended = range(1, 21, 2)
    wait([start("epilog", j) for j in ended] + [start("prolog", j) for j in range(21, 31)])
    running = [j for j in range(1, 31) if j not in ended]
    expected = {
        str(card): sorted(str(j) for j in running if str(card) in cards[j].split(",")) for card in range(4)
    }
    got = {name: sorted(ids) for name, ids in read_dir(str(tmp_path)).devices}
    assert got == {k: v for k, v in expected.items() if v}
    assert sorted(os.listdir(tmp_path / "jobs"), key=int) == [str(j) for j in running]
    assert not [p for p in tmp_path.rglob("*.tmp.*")]  # no temporary file left behind
