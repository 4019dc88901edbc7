"""docs/bare-metal.md, run: its command blocks into a temporary root folder, its systemd units checked by
Debian's `systemd-analyze verify` and started from their `ExecStart` lines as written, Debian's Prometheus
scraping with its scrape jobs and evaluating its generated rule files, Debian's Alertmanager with its
generated config, the relay to a stand-in DingTalk bot.

No systemd runs as init on the test machines, so a unit is "run" as systemd would run it: the ExecStart line
split as systemd splits it, ``${VAR}`` expanded from the unit's ``Environment=``, its ``EnvironmentFile=`` and
the variables systemd itself sets (``CONFIGURATION_DIRECTORY``, ``STATE_DIRECTORY``), and a bare command name
looked up on the path (systemd's fixed search path starts at /usr/local/bin; here the test's own install,
the folder of the running Python, stands for it). A guide block runs under bash with every ``/etc``, ``/run``,
``/var`` and ``/usr/local`` path moved below the temporary root, ``/opt/xpuwatch/bin/`` standing for the test's
install, ``sudo`` running its command as is, ``systemd-tmpfiles`` given ``--root``, and ``systemctl``,
``journalctl``, ``sudoedit`` and ``curl`` recorded instead of run (the records are checked).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ports import free_port
from tests.relay.fakebots import FakeDingTalk

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "bare-metal.md"
SYSTEMD = REPO / "deploy" / "systemd"
BIN = Path(sys.executable).parent  # the install under test: stands for /usr/local/bin and /opt/xpuwatch/bin
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
SHOWN = (
    "etc/xpuwatch/exporter.yaml",
    "etc/xpuwatch/relay.yaml",
    "etc/xpuwatch/relay.env",
    "prometheus/xpuwatch.yml",
    "prometheus/xpuwatch-site.yaml",
)
RECORDED = ("systemctl", "journalctl", "sudoedit", "curl")
SECRET = "SECf0e1d2c3b4a5968778695a4b3c2d1e0f"


def fenced() -> list[tuple[str, str]]:
    """Every fenced block of the guide: (language, text)."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.S | re.M)


def blocks() -> dict[str, str]:
    """The guide's command blocks by name (their first line, a comment), files shown as shipped left out."""
    files = {(SYSTEMD / f).read_text(encoding="utf-8") for f in SHOWN}
    out = {}
    for lang, text in fenced():
        if lang == "sh" and text not in files:
            name = text.splitlines()[0]
            assert name.startswith("# "), f"a command block without its name comment: {text[:80]!r}"
            out[name[2:]] = text
    return out


def test_the_guide_shows_the_shipped_files_as_they_are() -> None:
    texts = [text for _, text in fenced()]
    for name in SHOWN:
        assert (SYSTEMD / name).read_text(encoding="utf-8") in texts, (
            f"docs/bare-metal.md does not show {name}"
        )


def test_every_command_block_says_how_it_was_checked() -> None:
    doc = DOC.read_text(encoding="utf-8")
    table = doc[doc.index("## How each block was checked") :]
    listed = {
        name.strip()
        for row in re.findall(r"^\| ([^|]+) \|", table, re.M)
        for name in row.split(",")
        if row.strip() not in ("block", "---")
    }
    assert set(blocks()) == listed


def test_readme_links_the_guide() -> None:
    assert "(docs/bare-metal.md)" in (REPO / "README.md").read_text(encoding="utf-8")


@dataclass
class Root:
    """A temporary root folder the guide's blocks install into, and the ports its services listen on."""

    path: Path
    relay: int
    alertmanager: int

    @property
    def record(self) -> Path:
        return self.path / "recorded-commands"

    def local(self, text: str) -> str:
        """A guide text with its host paths and ports moved into this root (see the module docstring)."""
        text = text.replace("/opt/xpuwatch/bin/", f"{BIN}/")
        text = re.sub(r"(?<![\w.~/-])/(etc|run|var|usr/local)/", lambda m: f"{self.path}/{m.group(1)}/", text)
        return text.replace("127.0.0.1:9852", f"127.0.0.1:{self.relay}").replace(
            "127.0.0.1:9093", f"127.0.0.1:{self.alertmanager}"
        )

    def run(self, name: str) -> subprocess.CompletedProcess[str]:
        """Run the guide's block ``name`` (bash, stopping at the first failing command)."""
        stubs = [
            'sudo() { "$@"; }',
            'systemd-tmpfiles() { command systemd-tmpfiles --root="$XPW_ROOT" "$@"; }',
            *(f'{c}() {{ printf "%s\\n" "{c} $*" >> "$XPW_RECORD"; }}' for c in RECORDED),
            "set -e",
        ]
        script = "\n".join(stubs) + "\n" + self.local(blocks()[name])
        r = subprocess.run(
            ["bash", "-c", script],
            cwd=REPO,
            env={**_env(), "XPW_ROOT": str(self.path), "XPW_RECORD": str(self.record)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, f"{name}: {r.stderr}"
        return r

    def recorded(self) -> list[str]:
        return self.record.read_text().splitlines() if self.record.exists() else []


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPUWATCH_", "SLURM_"))}
    # PYTHONPATH: the checkout, as every test runs the package (tests/exporter/conftest.cli_env)
    return {**env, "PATH": f"{BIN}:{env.get('PATH', '')}", "PYTHONPATH": str(REPO)}


def service_section(unit: Path) -> dict[str, list[str]]:
    """The ``[Service]`` keys of a unit file (and its drop-ins' when given in order), each a list of values."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in unit.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def exec_start(unit: Path, root: Root, systemd_sets: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of the unit's ExecStart as systemd builds them (see the module docstring)."""
    svc = service_section(unit)
    env = dict(systemd_sets)
    for assignment in svc.get("Environment", []):
        for item in shlex.split(assignment):
            key, _, value = item.partition("=")
            env[key] = value
    for name in svc.get("EnvironmentFile", []):
        optional = name.startswith("-")
        path = Path(root.local(name.lstrip("-")))
        if not path.exists():
            assert optional, f"{unit.name}: EnvironmentFile {name} is missing"
            continue
        for line in path.read_text().splitlines():
            if line.strip() and not line.lstrip().startswith(("#", ";")):
                key, _, value = line.partition("=")
                env[key.strip()] = value.strip()
    (line,) = svc["ExecStart"]
    argv = shlex.split(re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], line))
    if "/" not in argv[0]:
        found = shutil.which(argv[0], path=str(BIN))
        assert found, f"{argv[0]} is not installed beside {sys.executable}"
        argv[0] = found
    return argv, {**_env(), **env}


@pytest.fixture
def root(tmp_path: Path) -> Root:
    """A root folder with the folders the blocks expect a Debian server with Prometheus to have."""
    r = Root(tmp_path / "root", free_port(), free_port())
    for folder in ("etc/systemd/system", "etc/prometheus", "usr/local/bin"):
        (r.path / folder).mkdir(parents=True)
    return r


def _install_units(root: Root) -> None:
    # "start the exporter" is systemctl, journalctl and curl alone: not run (see the guide's table)
    for name in ("exporter service", "exporter drop-ins", "relay service"):
        root.run(name)


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="needs Debian's systemd (systemd-analyze)"
)
def test_units_installed_as_the_guide_says_pass_systemd_analyze_verify(root: Root) -> None:
    _install_units(root)
    units = root.path / "etc" / "systemd" / "system"
    assert (root.path / "run" / "xpuwatch" / "jobs").is_dir()
    assert stat.S_IMODE((root.path / "run" / "xpuwatch" / "jobs").stat().st_mode) == 0o755
    assert stat.S_IMODE((root.path / "etc" / "xpuwatch" / "relay.env").stat().st_mode) == 0o600
    assert root.recorded() == ["sudoedit " + str(root.path / "etc/xpuwatch/relay.env")]
    # what verify needs of the system: its own units, and the command the units name on systemd's path
    shutil.copytree("/lib/systemd/system", root.path / "usr" / "lib" / "systemd" / "system", symlinks=True)
    stub = root.path / "usr" / "local" / "bin" / "xpuwatch"
    stub.parent.mkdir(parents=True, exist_ok=True)
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    dropins = units / "xpuwatch-exporter.service.d"
    shipped = sorted(p.name for p in dropins.iterdir())
    assert shipped == ["amd.conf", "ascend.conf", "dcgm-embedded.conf"]
    held = root.path / "drop-ins-aside"
    held.mkdir()
    for p in list(dropins.iterdir()):
        p.rename(held / p.name)
    for keep in [None, *shipped]:  # the unit alone, then with each drop-in
        for p in list(dropins.iterdir()):
            p.unlink()
        if keep is not None:
            shutil.copy(held / keep, dropins / keep)
        r = subprocess.run(
            [
                "systemd-analyze",
                "verify",
                "--man=no",
                "--generators=no",
                f"--root={root.path}",
                str(units / "xpuwatch-exporter.service"),
                str(units / "xpuwatch-relay.service"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), (keep, r.stdout + r.stderr)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def _texts(bot: FakeDingTalk) -> list[str]:
    return [f"{b['markdown']['title']}\n{b['markdown']['text']}" for b in bot.accepted]


async def _until(pred: Any, timeout: float, what: str, diagnose: Any) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{diagnose()}")
        await asyncio.sleep(0.25)


FAULT_AT = 8.0  # the simulated card's uncorrectable ECC error: after Prometheus has scraped the counter at 0


@pytest.mark.slow
@pytest.mark.skipif(
    not (os.access(ALERTMANAGER, os.X_OK) and os.access(PROMETHEUS, os.X_OK) and shutil.which("amtool")),
    reason="Debian's prometheus and prometheus-alertmanager (amtool) are required",
)
async def test_the_guide_end_to_end_an_alert_reaches_dingtalk_through_the_relay(
    root: Root, tmp_path: Path
) -> None:
    oncall = FakeDingTalk(tokens={"oncall"}, secret=SECRET)
    team = FakeDingTalk(tokens={"team"}, secret=SECRET)
    await oncall.start()
    await team.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _install_units(root)
        etc = root.path / "etc"
        # the sudoedit step: the token and the stand-in bots, the file keeps its 0600
        (etc / "xpuwatch" / "relay.env").write_text(
            "RELAY_TOKEN=0123456789abcdef0123456789abcdef\n"
            f"DINGTALK_ONCALL_URL={oncall.url('oncall')}\nDINGTALK_ONCALL_SECRET={SECRET}\n"
            f"DINGTALK_TEAM_URL={team.url('team')}\nDINGTALK_TEAM_SECRET={SECRET}\n"
        )
        # the settings a test cannot keep: free ports, the simulated fleet instead of detection
        exporter_port, prom_port = free_port(), free_port()
        relay_conf = yaml.safe_load((etc / "xpuwatch" / "relay.yaml").read_text())
        relay_conf["listen_address"] = f"127.0.0.1:{root.relay}"
        (etc / "xpuwatch" / "relay.yaml").write_text(yaml.safe_dump(relay_conf))
        conf = yaml.safe_load((etc / "xpuwatch" / "exporter.yaml").read_text())
        assert conf["job_mapping"]["dir"] == "/run/xpuwatch/jobs"
        scenario = {
            "seed": 5,
            "node": "gpu01",
            "poll_interval": 1,
            "devices": [{"vendor": "nvidia", "model": "NVIDIA A100-SXM4-80GB", "count": 4}],
            "timeline": [{"at": FAULT_AT, "device": "nvidia/1", "fault": "ecc_uncorrectable"}],
        }
        (tmp_path / "sim.yaml").write_text(yaml.safe_dump(scenario))
        conf["web"]["listen_address"] = f"127.0.0.1:{exporter_port}"
        conf["enable"] = ["sim"]
        conf["backends"] = {"sim": {"config": str(tmp_path / "sim.yaml")}}
        conf["job_mapping"]["dir"] = root.local(conf["job_mapping"]["dir"])
        (etc / "xpuwatch" / "exporter.yaml").write_text(yaml.safe_dump(conf))
        root.run("relay check and start")
        # Prometheus: the guide's scrape jobs and rule files in a config whose other parts are the site's
        (etc / "prometheus").mkdir(exist_ok=True)
        snippet = yaml.safe_load(root.local((SYSTEMD / "prometheus" / "xpuwatch.yml").read_text()))
        for job in snippet["scrape_configs"]:
            port = exporter_port if job["job_name"] == "xpuwatch" else root.relay
            job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
        (etc / "prometheus" / "prometheus.yml").write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "alerting": {
                        "alertmanagers": [
                            {"static_configs": [{"targets": [f"127.0.0.1:{root.alertmanager}"]}]}
                        ]
                    },
                    **snippet,
                }
            )
        )
        for name in ("prometheus rules", "alertmanager token", "no remediation route", "alertmanager config"):
            root.run(name)
        am_conf = yaml.safe_load((etc / "prometheus" / "alertmanager.yml").read_text())
        assert "remediate" not in {r["name"] for r in am_conf["receivers"]}
        assert "XpuwatchRemediationDown" not in (etc / "prometheus" / "xpuwatch" / "rules.yml").read_text()
        token = etc / "prometheus" / "xpuwatch" / "relay-token"
        assert token.read_text() == "0123456789abcdef0123456789abcdef"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600 and token.owner() == "prometheus"
        # a Slurm job on the card that will fail, as the shipped prolog records it
        prolog = subprocess.run(
            ["/bin/sh", str(REPO / "deploy/slurm/xpuwatch-jobmap.sh")],
            env={
                "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
                "SLURM_JOB_ID": "4711",
                "SLURM_JOB_USER": "alice",
                "SLURM_JOB_PARTITION": "gpu",
                "SLURM_JOB_GPUS": "1",
                "XPUWATCH_JOB_MAPPING_DIR": conf["job_mapping"]["dir"],
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert prolog.returncode == 0 and not prolog.stderr
        # the services, from their units
        state = root.path / "var" / "lib" / "xpuwatch-relay"
        state.mkdir(parents=True)
        configuration = {"CONFIGURATION_DIRECTORY": str(etc / "xpuwatch")}
        for unit, sets in (
            ("xpuwatch-relay.service", {**configuration, "STATE_DIRECTORY": str(state)}),
            ("xpuwatch-exporter.service", configuration),
        ):
            argv, env = exec_start(etc / "systemd" / "system" / unit, root, sets)
            assert env["MALLOC_MMAP_THRESHOLD_"] == "262144"
            log = (tmp_path / f"{unit}.log").open("w")
            procs.append(subprocess.Popen(argv, env=env, cwd="/", stdout=log, stderr=subprocess.STDOUT))
        am = f"http://127.0.0.1:{root.alertmanager}"
        procs.append(
            subprocess.Popen(
                [
                    ALERTMANAGER,
                    f"--config.file={etc / 'prometheus' / 'alertmanager.yml'}",
                    f"--storage.path={tmp_path / 'am'}",
                    f"--web.listen-address=127.0.0.1:{root.alertmanager}",
                    "--cluster.listen-address=",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={etc / 'prometheus' / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        prom = f"http://127.0.0.1:{prom_port}"

        def diagnose() -> str:
            out = []
            for what, url in (("targets", f"{prom}/api/v1/targets"), ("alerts", f"{prom}/api/v1/alerts")):
                try:
                    out.append(f"{what}: {json.dumps(_get(url))[:3000]}")
                except OSError as exc:
                    out.append(f"{what}: {exc}")
            out.append(f"dingtalk oncall answers {oncall.answers}, team answers {team.answers}")
            out += [p.read_text()[-2000:] for p in tmp_path.glob("*.service.log")]
            return "\n".join(out)

        def up(job: str) -> bool:
            try:
                result = _get(f"{prom}/api/v1/query?query=up%7Bjob%3D%22{job}%22%7D")["data"]["result"]
            except OSError:
                return False
            return bool(result) and all(r["value"][1] == "1" for r in result)

        await _until(lambda: up("xpuwatch") and up("xpuwatch-relay"), 60, "both scrape jobs up", diagnose)
        # the test page, as the guide sends it
        await asyncio.sleep(1)  # Alertmanager answers once it has loaded its config
        await _until(lambda: _amtool_ready(am), 30, "Alertmanager", diagnose)
        root.run("test page")
        await _until(
            lambda: any("XpuwatchTestPage" in t for t in _texts(oncall)),
            90,
            "the test page at DingTalk",
            diagnose,
        )
        # an alert of the generated rules: the simulated card's uncorrectable ECC error pages the on-call group
        await _until(
            lambda: any("AcceleratorEccUncorrectable" in t for t in _texts(oncall)),
            120,
            "AcceleratorEccUncorrectable at DingTalk",
            diagnose,
        )
        # the card's Slurm job reached Prometheus with the scrape job's series
        held = _get(f"{prom}/api/v1/query?query=accelerator_allocated%7Bjob%3D%22xpuwatch%22%7D")["data"][
            "result"
        ]
        assert [
            (
                r["metric"]["device"],
                r["metric"]["job_id"],
                r["metric"]["job_user"],
                r["metric"]["job_partition"],
            )
            for r in held
        ] == [("1", "4711", "alice", "gpu")]
        alert = next(
            a
            for a in _get(f"{prom}/api/v1/alerts")["data"]["alerts"]
            if a["labels"]["alertname"] == "AcceleratorEccUncorrectable"
        )
        assert alert["labels"]["job_id"] == "4711" and alert["labels"]["job_partition"] == "gpu"
        assert oncall.codes() and set(oncall.codes()) == {"0"}  # signed as the bot requires, none refused
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        await oncall.stop()
        await team.stop()


def _amtool_ready(am: str) -> bool:
    try:
        with urllib.request.urlopen(f"{am}/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False
