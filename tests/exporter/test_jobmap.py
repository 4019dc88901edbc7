"""Slurm job attribution (exporter/jobmap.py): the mapping directory in dcgm-exporter's format, matched to
devices and slices, with the pod mapping's grace rules, and the labels the collector puts on the series."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xpuwatch.exporter import catalog as C
from xpuwatch.exporter.attribution import (
    EMPTY,
    Attribution,
    Holder,
    MergedAttributionSource,
    StaticAttributionSource,
    slice_key,
)
from xpuwatch.exporter.collector import families
from xpuwatch.exporter.jobmap import (
    MAX_JOBS_PER_DEVICE,
    JobInfo,
    JobMap,
    JobMappingSettings,
    JobMappingSource,
    parse_device_file,
    parse_job_file,
    read_dir,
    resolve,
)
from xpuwatch.exporter.podmap import DeviceRef, SliceRef
from xpuwatch.exporter.poller import BackendView
from xpuwatch.exporter.settings import ConfigError, load, parse
from xpuwatch.vendors.base import Device, DeviceSample

GPUS = [DeviceRef("nvidia", f"GPU-{i}", str(i)) for i in range(4)]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_dcgm_exporters_own_example_directory_reads_as_it_does(tmp_path: Path) -> None:
    """The files of dcgm-exporter's TestHPCProcess ("When all GPU have job files",
    internal/pkg/transformation/hpc_test.go): 0 -> job1-0; 1 -> job1-1, job2-1; 3.0 -> job3.0-0; a directory
    and a name outside the convention are skipped."""
    _write(tmp_path, {"0": "job1-0\n", "1": "job1-1\njob2-1\n", "3.0": "job3.0-0"})
    (tmp_path / "iamdir").mkdir()
    (tmp_path / "7").mkdir()  # a directory with a device's name: skipped, as dcgm-exporter does
    (tmp_path / "notes.txt").write_text("not a mapping file\n")
    m = read_dir(str(tmp_path))
    assert m == JobMap((("0", ("job1-0",)), ("1", ("job1-1", "job2-1")), ("3.0", ("job3.0-0",))), (), ())


def test_device_file_lines() -> None:
    assert parse_device_file("17\n\n  18 \n17\n") == (("17", "18"), [])
    ids, problems = parse_device_file("17\nrm -rf /\n../x\n")
    assert ids == ("17",) and len(problems) == 2
    ids, problems = parse_device_file("".join(f"{i}\n" for i in range(MAX_JOBS_PER_DEVICE + 5)))
    assert len(ids) == MAX_JOBS_PER_DEVICE and problems == [f"more than {MAX_JOBS_PER_DEVICE} job ids"]


def test_job_file_keys() -> None:
    assert parse_job_file("user=alice\npartition=gpu\ncluster=hpc1\n") == (JobInfo("alice", "gpu"), [])
    info, problems = parse_job_file("user=two words\npartition=" + "p" * 200 + "\n")
    assert info == JobInfo("", "") and len(problems) == 2


def test_job_files_add_user_and_partition_and_bad_files_cost_only_themselves(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "0": "41\n",
            "1": "42\n",
            "2": "43\n",
            "jobs/41": "user=alice\npartition=gpu\n",
            "jobs/42": "user=bob\n",  # no partition recorded
            # 43: no job file (a dcgm-exporter-only prolog): the id alone
        },
    )
    os.mkfifo(tmp_path / "3")  # a FIFO never blocks the read
    (tmp_path / "4").symlink_to("/etc/hostname")  # a symlink is not followed
    m = read_dir(str(tmp_path))
    assert m.devices == (("0", ("41",)), ("1", ("42",)), ("2", ("43",)))
    assert dict(m.jobs) == {"41": JobInfo("alice", "gpu"), "42": JobInfo("bob", "")}
    assert sorted(name for name, _ in m.skipped) == ["3", "4"]
    attribution, unmatched = resolve(m, GPUS)
    assert unmatched == ()
    assert attribution.for_device("GPU-0") == (Holder.batch_job("41", "alice", "gpu"),)
    assert attribution.for_device("GPU-1") == (Holder.batch_job("42", "bob", ""),)
    assert attribution.for_device("GPU-2") == (Holder.batch_job("43"),)
    assert attribution.for_device("GPU-3") == ()


def test_missing_directory_raises_for_the_source_to_count() -> None:
    with pytest.raises(OSError):
        read_dir("/nonexistent/xpuwatch-jobs")


def test_index_matching_never_guesses() -> None:
    m = JobMap((("0", ("1",)), ("3", ("2",)), ("9", ("3",))), (("1", JobInfo("u", "p")),))
    mixed = [*GPUS[:2], DeviceRef("amd", "amd-0", "0")]  # two vendors with a device 0 on one node
    attribution, unmatched = resolve(m, mixed)
    assert unmatched == ("0", "3", "9") and attribution == EMPTY
    # a supplementing backend (dcgm over nvml) lists a device twice: still one device
    attribution, unmatched = resolve(m, [*GPUS, GPUS[0]])
    assert unmatched == ("9",)
    assert attribution.for_device("GPU-0") == (Holder.batch_job("1", "u", "p"),)


def test_ascend_chips_by_index_physical_id_or_npu_chip_zero() -> None:
    # 910B: "<npu>-0", one chip per NPU; 310P: two chips per card, /dev/davinci<n> is the physical id
    npus = [DeviceRef("huawei", f"npu-{i}", f"{i}-0") for i in range(2)] + [
        DeviceRef("huawei", "p-a", "5-0", aliases=("phy-2",)),
        DeviceRef("huawei", "p-b", "5-1", aliases=("phy-3",)),
    ]
    m = JobMap((("1", ("7",)), ("3", ("8",))))
    attribution, unmatched = resolve(m, npus)
    assert unmatched == ()
    assert attribution.for_device("npu-1") == (Holder.batch_job("7"),)
    assert attribution.for_device("p-b") == (Holder.batch_job("8"),)


def test_mig_files_name_the_gpu_instance_slices() -> None:
    slices = [
        SliceRef("GPU-2", "1/0", "MIG-x"),
        SliceRef("GPU-2", "1/1", "MIG-y"),
        SliceRef("GPU-2", "2/0", None),
    ]
    m = JobMap((("2.1", ("5",)), ("2.4", ("6",)), ("3.0", ("7",))))
    attribution, unmatched = resolve(m, GPUS, slices)
    assert unmatched == ("2.4", "3.0")
    held = dict(attribution.entries)
    assert set(held) == {slice_key("GPU-2", "1/0"), slice_key("GPU-2", "1/1")}
    assert attribution.for_device("GPU-2") == ()


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _source(path: Path, grace: float = 300.0) -> tuple[JobMappingSource, Clock]:
    clock = Clock()
    source = JobMappingSource(
        JobMappingSettings(str(path), 5.0, grace), lambda: (GPUS, ()), clock, wall=lambda: 1.7e9 + clock.t
    )
    return source, clock


def test_labels_come_with_the_prolog_and_go_with_the_epilog(tmp_path: Path) -> None:
    source, _ = _source(tmp_path)
    assert source.status() is None and source.up() is None
    assert source.refresh()
    assert source.current() == EMPTY and source.up() is True
    _write(tmp_path, {"1": "77\n", "2": "77\n", "jobs/77": "user=alice\npartition=gpu\n"})
    assert source.refresh()
    job = Holder.batch_job("77", "alice", "gpu")
    assert [source.current().for_device(g.uuid) for g in GPUS] == [(), (job,), (job,), ()]
    first = source.current()
    assert source.refresh() and source.current() is first  # unchanged: the same object (render cache)
    for name in ("1", "2", "jobs/77"):
        (tmp_path / name).unlink()
    assert source.refresh()
    assert source.current() == EMPTY
    status = source.status()
    assert status is not None and status.up and status.unmatched == (("files", 0),)


def test_a_vanished_directory_keeps_labels_for_the_grace_then_drops_them(tmp_path: Path) -> None:
    d = tmp_path / "jobs"
    d.mkdir()
    _write(d, {"0": "5\n"})
    source, clock = _source(d, grace=60)
    assert source.refresh()
    d.rename(tmp_path / "gone")
    clock.t += 30
    assert not source.refresh()
    assert source.up() is False
    assert source.current().for_device("GPU-0") == (Holder.batch_job("5"),)  # within the grace
    clock.t += 31
    assert source.current() == EMPTY  # past it: the job may have ended meanwhile
    status = source.status()
    assert status is not None and not status.up and status.last_success == 1.7e9 + 1000.0
    (tmp_path / "gone").rename(d)
    assert source.refresh() and source.current().for_device("GPU-0") == (Holder.batch_job("5"),)


def test_zero_grace_drops_at_the_first_failure(tmp_path: Path) -> None:
    _write(tmp_path / "j", {"0": "5\n"})
    source, _ = _source(tmp_path / "j", grace=0)
    assert source.refresh()
    (tmp_path / "j" / "0").unlink()
    (tmp_path / "j").rmdir()
    assert not source.refresh() and source.current() == EMPTY


def test_unmatched_files_are_counted(tmp_path: Path) -> None:
    _write(tmp_path, {"0": "5\n", "12": "6\n"})
    source, _ = _source(tmp_path)
    assert source.refresh()
    status = source.status()
    assert status is not None and status.unmatched == (("files", 1),)


def _sample(i: int) -> DeviceSample:
    return DeviceSample(Device("nvidia", "NVIDIA H100", str(i), f"GPU-{i}"), utilization_ratio=0.5)


def _series(fams: list, name: str) -> list[dict[str, str]]:
    return [s.labels for f in fams for s in f.samples if s.name == name]


def test_one_job_labels_every_series_of_its_card_two_jobs_only_the_allocation() -> None:
    view = BackendView("nvml", True, tuple(_sample(i) for i in range(3)), 3, 1.7e9, 0.1, {}, 1, True)
    a, b = Holder.batch_job("101", "alice", "gpu"), Holder.batch_job("102", "bob", "debug")
    attribution = Attribution.of({"GPU-0": [a], "GPU-1": [a, b]})
    fams = families("n1", [view], attribution, None, job_status=None)
    util = {s["uuid"]: s for s in _series(fams, C.UTILIZATION)}
    assert {k: util["GPU-0"][k] for k in C.JOB_LABELS} == {
        "job_id": "101",
        "job_user": "alice",
        "job_partition": "gpu",
    }
    assert "namespace" not in util["GPU-0"]
    assert not set(C.JOB_LABELS) & set(util["GPU-1"]) and not set(C.JOB_LABELS) & set(util["GPU-2"])
    allocated = sorted(
        (s["uuid"], s["job_id"], s["job_user"], s["job_partition"], s["owner"], s["workload_kind"], s["pod"])
        for s in _series(fams, C.ALLOCATED)
    )
    assert allocated == [
        ("GPU-0", "101", "alice", "gpu", "alice", "job", ""),
        ("GPU-1", "101", "alice", "gpu", "alice", "job", ""),
        ("GPU-1", "102", "bob", "debug", "bob", "job", ""),
    ]
    assert not _series(fams, C.JOB_MAPPING_UP)  # no job mapping configured: no self-metric


def test_job_mapping_self_metrics() -> None:
    from xpuwatch.exporter.attribution import MappingStatus

    fams = families("n1", [], EMPTY, None, job_status=MappingStatus(False, 1.7e9, (("files", 3),)))
    values = {s.name: s.value for f in fams for s in f.samples}
    assert values[C.JOB_MAPPING_UP] == 0
    assert values[C.JOB_MAPPING_LAST_SUCCESS] == 1.7e9
    assert values[C.JOB_MAPPING_UNMATCHED] == 3


def test_merged_source_keeps_pods_and_jobs_and_merges_only_on_change() -> None:
    pod = Holder("ns", "p", "c", "job", "")
    job = Holder.batch_job("9", "u", "gpu")
    pods = StaticAttributionSource(Attribution.of({"GPU-0": [pod]}), up=True)
    jobs = StaticAttributionSource(Attribution.of({"GPU-0": [job], "GPU-1": [job]}))
    merged = MergedAttributionSource(pods, jobs)
    got = merged.current()
    assert got.for_device("GPU-0") == tuple(sorted((pod, job))) and got.for_device("GPU-1") == (job,)
    assert merged.current() is got and merged.up() is True


def test_settings_file_env_and_flag() -> None:
    s = parse({"job_mapping": {"dir": "/run/xpuwatch/jobs", "interval": 2, "grace": 0}})
    assert s.job_mapping == JobMappingSettings("/run/xpuwatch/jobs", 2.0, 0.0)
    assert parse({}).job_mapping.dir is None
    with pytest.raises(ConfigError, match=r"^job_mapping\.dirs: unknown key"):
        parse({"job_mapping": {"dirs": "/x"}})
    with pytest.raises(ConfigError, match=r"^job_mapping\.interval: "):
        parse({"job_mapping": {"dir": "/x", "interval": 0}})
    env = {"XPUWATCH_JOB_MAPPING_DIR": "/var/run/nvidia/slurm"}
    assert load(None, env, {}).job_mapping.dir == "/var/run/nvidia/slurm"
    assert load(None, env, {"job_mapping_dir": "/flag"}).job_mapping.dir == "/flag"
