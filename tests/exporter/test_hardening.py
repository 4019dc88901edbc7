"""Bad configs name their key; inspect and replay refuse what they cannot read safely; SIGHUP is ignored
with a log line (Prometheus convention: reload or ignore, never die); SIGTERM kills a hung vendor tool."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.exporter.conftest import cli_env
from tests.vendors.test_command import alive, hanging_tool, wait_dead, wait_for_pids
from xpuwatch.exporter.cli import Clocks, assemble, inspect_files, replayable
from xpuwatch.exporter.settings import ConfigError, parse
from xpuwatch.vendors.command import SubprocessRunner


def build(doc: Any) -> None:
    settings = parse(yaml.safe_load(doc))
    assemble(settings, [], Clocks(time.time, time.monotonic), SubprocessRunner(), "n1")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("backends: {nvidia-smi: {timout: 3}}", "backends.nvidia-smi.timout: unknown option of backend"),
        (
            "backends: {nvidia-smi: {binary: [a, b]}}",
            "backends.nvidia-smi.binary: must be a non-empty string",
        ),
        (
            "backends: {amd: {timeout_seconds: abc}}",
            "backends.amd.timeout_seconds: must be a number of seconds",
        ),
        (
            "backends: {amd: {timeout_seconds: -5}}",
            "backends.amd.timeout_seconds: must be a number of seconds",
        ),
        ("backends: {nvml: {xid_events: maybe}}", "backends.nvml.xid_events: must be true or false"),
        ("backends: {sim: {interval: 0.001}}", "backends.sim.interval: must be at least 0.5 seconds"),
        ("backends: {sim: {timeout: -5}}", "backends.sim.timeout: must be a number > 0"),
        (
            "backends: {cnmon: {max_output_bytes: 1.5}}",
            "backends.cnmon.max_output_bytes: must be a whole number",
        ),
        (
            "backends: {cambricon: {max_output_bytes: 12}}",
            "backends.cambricon.max_output_bytes: must be a whole",
        ),
    ],
)
def test_bad_backend_settings_name_their_key(doc: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        build(doc)
    assert str(err.value).startswith(message), str(err.value)


def test_declared_options_pass_and_the_cap_is_kept() -> None:
    s = parse(
        yaml.safe_load(
            "backends: {cambricon: {path: /opt/cnmon, timeout_seconds: 2, max_output_bytes: 4096}}"
        )
    )
    assert s.backend("cambricon").max_output_bytes == 4096
    assert dict(s.backend("cambricon").options) == {"path": "/opt/cnmon", "timeout_seconds": 2}
    assemble(s, [], Clocks(time.time, time.monotonic), SubprocessRunner(), "n1")


def test_inspect_refuses_fifo_and_device_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    body, errors = inspect_files([str(fifo), "/dev/zero"], None, "n1")
    assert b"accelerator_up" not in body
    assert [e.split(": ", 1)[1] for e in errors] == [
        f"cannot read: {fifo}: is a FIFO; give a regular file",
        "cannot read: /dev/zero: is a device; give a regular file",
    ]


def test_replay_never_loads_a_live_library() -> None:
    assert replayable(["nvml", "nvidia-smi", "sim"], "b.json") == ["nvidia-smi", "sim"]
    with pytest.raises(ConfigError, match="library backends cannot be replayed"):
        replayable(["nvml", "dcgm"], "b.json")
    with pytest.raises(ConfigError, match="unknown backend 'nosuch'"):
        replayable(["nosuch"], "b.json")


@pytest.mark.slow
def test_sighup_is_ignored_and_sigterm_kills_a_hung_tool(tmp_path: Path, start_exporter) -> None:  # type: ignore[no-untyped-def]
    tool, pids = hanging_tool(tmp_path)
    config = tmp_path / "x.yaml"
    config.write_text(f"backends:\n  nvidia-smi: {{binary: {tool}, interval: 1, timeout: 60}}\n")
    exp = start_exporter("--config", str(config), "--backend", "nvidia-smi", env=cli_env())
    running = wait_for_pids(pids)
    exp.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30  # a safety net, not a speed assertion
    while not any("SIGHUP received: ignored" in line for line in exp.log):
        assert time.monotonic() < deadline and exp.proc.poll() is None, "".join(exp.log)
        time.sleep(0.05)
    assert exp.proc.poll() is None and all(alive(p) for p in running)
    exp.proc.send_signal(signal.SIGTERM)
    assert exp.proc.wait(30) == 0
    wait_dead(running)  # the tool and its child did not outlive the exporter
    assert any("killed 1 running vendor tool(s)" in line for line in exp.log), "".join(exp.log)
