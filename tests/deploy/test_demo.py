"""`xpuwatch demo` end to end: the real command with real Prometheus, Alertmanager, relay, remediation and
exporter on a short scenario; a hardware message reaches the WeCom stand-in, a performance message the
Feishu stand-in, the controller logs a dry-run decision, and everything is gone afterwards."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Two A100s: a training job and an idle notebook; an uncorrectable ECC error 10 s in. The demo runs the
# timeline from Prometheus's first scrape (timeline_start: first_scrape, its default), so the counter's step
# from 0 to 1 is an increase however slowly the stack came up (once, under load, the stack was ready after
# 13 s, the fault had happened before the first scrape, and no ECC alert fired).
SHORT_SCENARIO = """\
seed: 7
node: demo-node
devices:
  - {vendor: nvidia, model: "NVIDIA A100-SXM4-80GB", count: 2}
timeline:
  - {at: 0, device: "nvidia/0", profile: training, pod: {namespace: ml-team, pod: train-llm-0, container: trainer, workload_kind: job}}
  - {at: 0, device: "nvidia/1", profile: idle_notebook, pod: {namespace: ml-team, pod: jupyter-alice, container: notebook, workload_kind: notebook, owner: alice}}
  - {at: 10, device: "nvidia/0", fault: ecc_uncorrectable}
"""
# The demo stops once every line the test looks for was printed (--until); DURATION only bounds a broken
# run. On a quiet machine the story is told about 35 s after the stack is ready: IdleNotebook fires 15 s
# after the first scrape and waits 5 s for its group; the ECC message comes about 10 s in.
DURATION = 300
STORY = (
    r"^WeCom\s+## \[FIRING:1\] AcceleratorEccUncorrectable demo-node",
    r"^Feishu\s+\[FIRING:1\] AcceleratorIdleNotebook ml-team",
    r"^remediation\s+decision drain start node/demo-node \[\w+\]: allowed \(dry-run\)",
    r"^remediation\s+decision drain start node/demo-node \[\w+\]: refused \(cooldown\)",
    r"^remediation\s+decision reclaim notify pod/ml-team/jupyter-alice \[AcceleratorIdleNotebook\]: allowed",
    r"^remediation\s+dry-run drain start -> ok: would start drain on node/demo-node",
    r"^WeCom\s.*XpuwatchRemediationNotice.*would start drain on node/demo-node",
    r"^Feishu\s.*XpuwatchRemediationNotice.*would notify reclaim on pod/ml-team/jupyter-alice",
)
NEEDS_TOOLS = pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("prometheus-alertmanager")),
    reason="Debian's prometheus and prometheus-alertmanager are required",
)


def demo(
    args: list[str], tmp: Path, timeout: float, path: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "xpuwatch", "demo", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def blocks(stdout: str, source: str) -> list[str]:
    """The texts printed for ``source``: a header line plus its ``|`` continuation lines each."""
    printed: list[tuple[str, str]] = []
    for line in stdout.splitlines():
        m = re.match(r"^\d\d:\d\d:\d\d +[+-][\d.]+s  (\S+) *(.*)$", line)
        if m:
            printed.append((m.group(1), m.group(2)))
        elif printed and line.lstrip().startswith("| "):
            printed[-1] = (printed[-1][0], printed[-1][1] + "\n" + line.split("| ", 1)[1])
    return [text for src, text in printed if src == source]


@pytest.mark.slow
@NEEDS_TOOLS
def test_demo_delivers_hardware_and_performance_messages_and_cleans_up(tmp_path: Path) -> None:
    scenario = tmp_path / "short.yaml"
    scenario.write_text(SHORT_SCENARIO, encoding="utf-8")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    until = [arg for pattern in STORY for arg in ("--until", pattern)]
    res = demo(
        ["--duration", str(DURATION), "--scenario", str(scenario), *until], tmp, timeout=DURATION + 120
    )
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    assert "stopping (every --until pattern seen)" in out, out

    wecom, feishu, remediation = blocks(out, "WeCom"), blocks(out, "Feishu"), blocks(out, "remediation")
    ecc = [m for m in wecom if m.startswith("## [FIRING:1] AcceleratorEccUncorrectable demo-node")]
    assert ecc, out
    assert "device=0" in ecc[0] and "pod=train-llm-0" in ecc[0]
    idle = [m for m in feishu if m.startswith("[FIRING:1] AcceleratorIdleNotebook ml-team")]
    assert idle, out
    assert "Idle notebook ml-team/jupyter-alice holds an accelerator" in idle[0]
    # ECC and its XID 48 fire together and reach the controller in either order: the first drains the node,
    # the second is refused by the per-node cooldown
    drains = [m for m in remediation if m.startswith("decision drain start node/demo-node [")]
    assert [m.split("]: ")[1].split(":")[0] for m in drains] == ["allowed (dry-run)", "refused (cooldown)"], (
        out
    )
    assert {m.split("[")[1].split("]")[0] for m in drains} == {
        "AcceleratorEccUncorrectable",
        "AcceleratorFaultCritical",
    }
    assert any(
        m.startswith(
            "decision reclaim notify pod/ml-team/jupyter-alice [AcceleratorIdleNotebook]: allowed (dry-run)"
        )
        for m in remediation
    ), out
    assert any(
        m.startswith("dry-run drain start -> ok: would start drain on node/demo-node") for m in remediation
    )
    # The controller's notices follow their alert's category: the dry-run drain for the ECC fault reaches the
    # on-call WeCom group, the reclaim notice the team's Feishu group (every notice went to Feishu before).
    notices = {
        src: [m for m in msgs if "XpuwatchRemediationNotice" in m]
        for src, msgs in (("WeCom", wecom), ("Feishu", feishu))
    }
    assert any("would start drain on node/demo-node" in m for m in notices["WeCom"]), out
    assert any("would notify reclaim on pod/ml-team/jupyter-alice" in m for m in notices["Feishu"]), out
    assert not any("drain" in m for m in notices["Feishu"]), out
    assert not any("reclaim" in m for m in notices["WeCom"]), out

    # every child it started has been reaped, and nothing of the working directory is left
    pids, workdir = pids_and_workdir(out)
    assert sorted(pids.values()) == ["alertmanager", "exporter", "prometheus", "relay", "remediation"]
    assert_gone(pids)
    assert str(workdir).startswith(str(tmp)) and not workdir.exists()
    assert list(tmp.iterdir()) == []
    assert "summary: " in out and "first hardware message at +" in out


def test_missing_prometheus_names_the_debian_package(tmp_path: Path) -> None:
    res = demo(["--duration", "1"], tmp_path, timeout=120, path=str(tmp_path))
    assert res.returncode == 2
    assert "sudo apt-get install prometheus" in res.stderr
    assert list(tmp_path.iterdir()) == []


@NEEDS_TOOLS
def test_missing_alertmanager_names_the_debian_package(tmp_path: Path) -> None:
    res = demo(["--duration", "1", "--alertmanager-bin", str(tmp_path / "nope")], tmp_path, timeout=120)
    assert res.returncode == 2
    assert "alertmanager binary" in res.stderr and "not found" in res.stderr


@NEEDS_TOOLS
def test_bad_scenario_is_refused_with_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("timeline:\n  - {at: 0, device: '0', fault: melt}\n", encoding="utf-8")
    res = demo(["--scenario", str(bad)], tmp_path, timeout=120)
    assert res.returncode == 2
    assert "timeline[0].fault" in res.stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes it: refused, never waited on
    res = demo(["--scenario", str(fifo)], tmp_path, timeout=120)
    assert res.returncode == 2
    assert res.stderr == f"xpuwatch demo: --scenario: cannot read {fifo}: is a FIFO, not a regular file\n"


def test_a_bad_until_pattern_is_refused_before_anything_starts(tmp_path: Path) -> None:
    res = demo(["--until", "AcceleratorEcc[", "--duration", "1"], tmp_path, timeout=120)
    assert res.returncode == 2 and list(tmp_path.iterdir()) == []
    assert res.stderr.startswith("xpuwatch demo: --until 'AcceleratorEcc[': not a regular expression: ")


def test_the_story_runs_from_the_first_scrape_unless_the_scenario_says_otherwise(tmp_path: Path) -> None:
    from xpuwatch.deploy.demo import load_demo_scenario
    from xpuwatch.vendors.sim import parse_scenario

    packaged_text, packaged = load_demo_scenario(None)
    assert packaged.timeline_start == "first_scrape" and "timeline_start: first_scrape" in packaged_text
    mine = tmp_path / "mine.yaml"
    mine.write_text(SHORT_SCENARIO, encoding="utf-8")
    text, scenario = load_demo_scenario(mine)
    assert scenario.timeline_start == "first_scrape"
    assert scenario.timeline == parse_scenario(SHORT_SCENARIO).timeline and len(scenario.timeline) == 3
    assert "timeline_start: first_scrape" in text  # the file the exporter is given says it too
    mine.write_text("timeline_start: start\n" + SHORT_SCENARIO, encoding="utf-8")
    assert load_demo_scenario(mine)[1].timeline_start == "start"


def pids_and_workdir(out: str) -> tuple[dict[int, str], Path]:
    pids = {int(p): name for name, p in re.findall(r"started (\w+) \(pid (\d+)\)", out)}
    workdir = re.search(r"working directory (\S+)", out)
    assert workdir, out
    return pids, Path(workdir.group(1))


def assert_gone(pids: dict[int, str]) -> None:
    for pid, name in pids.items():
        cmdline = Path(f"/proc/{pid}/cmdline")
        if cmdline.exists():  # only a reused pid, never one of ours
            text = cmdline.read_bytes().decode(errors="replace")
            assert "-m\x00xpuwatch\x00" not in text and "prometheus" not in text, (name, text)


@pytest.mark.slow
@NEEDS_TOOLS
def test_ctrl_c_stops_every_child_and_removes_the_workdir(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "xpuwatch", "demo"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "stack ready after" in line:
                break
        proc.send_signal(signal.SIGINT)  # what the terminal sends to the foreground process group's leader
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines) + rest
    assert proc.returncode == 0, out
    assert "stopping (SIGINT)" in out
    pids, workdir = pids_and_workdir(out)
    assert sorted(pids.values()) == ["alertmanager", "exporter", "prometheus", "relay", "remediation"]
    assert all(f"stopped {name} (pid {pid})\n" in out for pid, name in pids.items()), out
    assert_gone(pids)
    assert not workdir.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.slow
@NEEDS_TOOLS
def test_sighup_with_the_terminal_gone_stops_every_child_and_removes_the_workdir(tmp_path: Path) -> None:
    """A closed terminal: SIGHUP, and every later write to stdout fails. Before, SIGHUP's default killed the
    demo at once, leaving its five children with PPID 1 on their ports and the working directory (bot
    secrets included) in TMPDIR."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "xpuwatch", "demo"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "stack ready after" in line:
                break
        proc.stdout.close()  # the terminal is gone: the demo's next write gets EPIPE
        proc.send_signal(signal.SIGHUP)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    pids, workdir = pids_and_workdir(out)
    assert sorted(pids.values()) == ["alertmanager", "exporter", "prometheus", "relay", "remediation"]
    try:
        assert_gone(pids)
    finally:  # a failed run leaves no orphan behind for the next test
        for pid in pids:
            with contextlib.suppress(OSError):
                if str(workdir) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    os.kill(pid, signal.SIGKILL)
    assert not workdir.exists() and list(tmp_path.iterdir()) == []
    assert proc.returncode == 0


@pytest.mark.slow
@NEEDS_TOOLS
def test_a_component_that_cannot_start_fails_the_demo_with_its_log(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = demo(["--duration", "5", "--prometheus-port", str(port)], tmp_path, timeout=120)
    out = res.stdout
    assert res.returncode == 1, out + res.stderr
    assert "error: prometheus exited with code 1" in out
    assert "address already in use" in out  # the tail of Prometheus' own log
    pids, workdir = pids_and_workdir(out)
    assert_gone(pids)
    assert not workdir.exists() and list(tmp_path.iterdir()) == []


def test_free_ports_never_hands_two_components_the_same_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may return a just-released port again (CI saw the exporter and the relay both
    given one port); picks are held until all are made, and a repeat pick is drawn again."""
    from xpuwatch.deploy import demo as demo_mod

    real_socket = socket.socket
    repeats = iter([0, 0])  # the first two binds both ask for one fixed port

    with real_socket() as probe:
        probe.bind(("127.0.0.1", 0))
        fixed = probe.getsockname()[1]

    class RepeatingSocket(real_socket):  # type: ignore[misc]
        def bind(self, address: tuple[str, int]) -> None:
            if next(repeats, None) is not None:
                self.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                self.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                super().bind((address[0], fixed))
            else:
                super().bind(address)

    monkeypatch.setattr(demo_mod.socket, "socket", RepeatingSocket)
    names = ["exporter", "prometheus", "alertmanager", "relay", "remediation"]
    ports = demo_mod.free_ports({name: 0 for name in names})
    assert list(ports) == names
    assert len(set(ports.values())) == 5
    assert ports["exporter"] == fixed and ports["prometheus"] != fixed
    # Every socket was closed: each port can be bound again at once.
    for port in ports.values():
        with real_socket() as s:
            s.bind(("127.0.0.1", port))


def test_free_ports_keeps_requested_ports_and_avoids_them() -> None:
    from xpuwatch.deploy.demo import free_ports

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        mine = s.getsockname()[1]
    ports = free_ports({"exporter": mine, "relay": 0, "remediation": 0})
    assert ports["exporter"] == mine
    assert len({*ports.values()}) == 3


@pytest.mark.parametrize(
    ("ports", "message"),
    [
        (
            ["--exporter-port", "19100", "--relay-port", "19100"],
            "--exporter-port and --relay-port are both 19100",
        ),
        (
            ["--exporter-port", "70000"],
            "--exporter-port: must be 1-65535 (0 or absent: a free one), got 70000",
        ),
    ],
)
def test_bad_ports_are_refused_before_anything_starts(tmp_path: Path, ports: list[str], message: str) -> None:
    res = demo(["--duration", "5", *ports], tmp_path, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip() == f"xpuwatch demo: {message}"
    assert res.stdout == "" and list(tmp_path.iterdir()) == []  # no working directory, nothing started
