"""docs/bare-metal.md, run: its command blocks into a temporary root folder, its systemd units checked by
Debian's `systemd-analyze verify` and started from their `ExecStart` lines as written, Debian's Prometheus
scraping with its scrape jobs and evaluating its generated rule files, Debian's Alertmanager with its
generated config (a dedicated one, and xpuwatch's fragment merged into an existing one), the relay to stand-in
DingTalk bots (one robot as shipped, and two as the guide says to set up), and ``xpuwatch rules test-page``
through all of them.

No systemd runs as init on the test machines, so a unit is "run" as systemd would run it: the ExecStart line
split as systemd splits it, ``${VAR}`` expanded from the unit's ``Environment=``, its ``EnvironmentFile=`` and
the variables systemd itself sets (``CONFIGURATION_DIRECTORY``, ``STATE_DIRECTORY``), and a bare command name
looked up on the path (systemd's fixed search path starts at /usr/local/bin; here the test's own install,
the folder of the running Python, stands for it). A guide block runs under bash with every ``/etc``, ``/run``,
``/var`` and ``/usr/local`` path moved below the temporary root, ``/opt/xpuwatch/bin/`` standing for the test's
install, ``sudo`` running its command as is, ``systemd-tmpfiles`` given ``--root``, and ``systemctl``,
``journalctl``, ``sudoedit`` and ``curl`` recorded instead of run (the records are checked). Where the guide
has the user edit a file (``sudoedit``), the test makes the edit the guide describes.
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
from xpuwatch.exporter import catalog as C

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
# What the test shortens in the installed site.yaml: the routes' waits (a test cannot wait 2 minutes for the
# performance route). Receivers, routes and inhibitions stay the guide's.
FAST = {r: {"group_wait": "1s", "group_interval": "1s"} for r in ("hardware", "performance", "meta")}
EXISTING = {  # an Alertmanager that already routes other alerts, as "yours" for the merge block
    "debian": Path("/etc/prometheus/alertmanager.yml"),  # as Debian's prometheus-alertmanager installs it
    "hand-written": REPO / "docs" / "examples" / "routing" / "existing-alertmanager.yml",
}


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

    def run(self, name: str, append: str = "") -> subprocess.CompletedProcess[str]:
        """Run the guide's block ``name`` (bash, stopping at the first failing command); ``append``: words
        added to its last command."""
        stubs = [
            'sudo() { "$@"; }',
            'systemd-tmpfiles() { command systemd-tmpfiles --root="$XPW_ROOT" "$@"; }',
            *(f'{c}() {{ printf "%s\\n" "{c} $*" >> "$XPW_RECORD"; }}' for c in RECORDED),
            "set -e",
        ]
        script = "\n".join(stubs) + "\n" + self.local(blocks()[name]).rstrip("\n") + append + "\n"
        r = subprocess.run(
            ["bash", "-c", script],
            cwd=REPO,
            env={**_env(), "XPW_ROOT": str(self.path), "XPW_RECORD": str(self.record)},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert r.returncode == 0, f"{name}: {r.stdout}{r.stderr}"
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


FAULT_AT = (
    8.0  # the simulated card's uncorrectable ECC error, after Prometheus's first scrape saw the counter at 0
)
ROBOTS = {1: {"ops-dingtalk": "ops"}, 2: {"ops-dingtalk": "ops", "team-dingtalk": "team"}}  # channel: token


def _write_prometheus_yml(root: Root, exporter_port: int) -> None:
    """/etc/prometheus/prometheus.yml: the guide's scrape jobs and rule files in a config whose other parts are
    the site's (fast intervals, the test's Alertmanager), the targets on this machine's free ports."""
    snippet = yaml.safe_load(root.local((SYSTEMD / "prometheus" / "xpuwatch.yml").read_text()))
    for job in snippet["scrape_configs"]:
        port = exporter_port if job["job_name"] == "xpuwatch" else root.relay
        job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    (root.path / "etc" / "prometheus" / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "alerting": {
                    "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{root.alertmanager}"]}]}]
                },
                **snippet,
            }
        )
    )


def _edit_site_spec(root: Root, robots: int) -> None:
    """The "site spec" block's sudoedit: the second robot as the guide says (section 4), and :data:`FAST`."""
    path = root.path / "etc" / "prometheus" / "xpuwatch" / "site.yaml"
    site = yaml.safe_load(path.read_text())
    assert (
        site["routing"]["hardware"]["receiver"]
        == site["routing"]["performance"]["receiver"]
        == "ops-dingtalk"
    )
    assert site["routing"]["remediation"] == {"enabled": False} and "disabled_alerts" not in site
    if robots == 2:
        site["routing"]["performance"]["receiver"] = "team-dingtalk"
    for route, timing in FAST.items():
        site["routing"].setdefault(route, {}).update(timing)
    path.write_text(yaml.safe_dump(site))


def _second_robot(path: Path) -> None:
    """Uncomment the second robot's lines of the installed relay.yaml or relay.env, as their comments say."""
    text = path.read_text()
    out = re.sub(r"^(\s*)#(team-dingtalk:|  \w+_env:|  type:|DINGTALK_TEAM_\w+=)", r"\1\2", text, flags=re.M)
    assert out != text, f"{path.name} has no second robot to uncomment"
    path.write_text(out)


def keys_of(lines: list[str]) -> list[str]:
    """The variable each line of an environment file sets ("" for comments and blank lines)."""
    return ["" if not ln or ln.startswith("#") else ln.split("=", 1)[0] for ln in lines]


def _relay_urls(config: dict[str, Any]) -> list[str]:
    return [w["url"] for r in config["receivers"] for w in r.get("webhook_configs", [])]


def _assert_every_receiver_posts_to_a_relay_channel(root: Root, am_config: Path) -> None:
    """No receiver posts to an absent remediation service or to a channel the relay does not have."""
    channels = set(yaml.safe_load((root.path / "etc" / "xpuwatch" / "relay.yaml").read_text())["channels"])
    urls = _relay_urls(yaml.safe_load(am_config.read_text()))
    prefix = f"http://127.0.0.1:{root.relay}/alertmanager/"
    assert urls and all(u.startswith(prefix) for u in urls), urls
    assert {u.removeprefix(prefix) for u in urls} == channels


def _metric_total(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as r:
        body = r.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith((f"{name}{{", f"{name} "))
    )


@pytest.mark.slow
@pytest.mark.skipif(
    not (os.access(ALERTMANAGER, os.X_OK) and os.access(PROMETHEUS, os.X_OK) and shutil.which("amtool")),
    reason="Debian's prometheus and prometheus-alertmanager (amtool) are required",
)
@pytest.mark.parametrize("robots", [1, 2], ids=["one-robot", "two-robots"])
async def test_the_guide_end_to_end_an_alert_and_the_test_page_reach_dingtalk_through_the_relay(
    root: Root, tmp_path: Path, robots: int
) -> None:
    bots = {channel: FakeDingTalk(tokens={token}, secret=SECRET) for channel, token in ROBOTS[robots].items()}
    for bot in bots.values():
        await bot.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _install_units(root)
        etc = root.path / "etc"
        # the sudoedit step: the token and the stand-in robots, the file keeps its 0600
        env_file = etc / "xpuwatch" / "relay.env"
        if robots == 2:
            _second_robot(env_file)
        written = {"RELAY_TOKEN": "0123456789abcdef0123456789abcdef"}
        for channel, access in ROBOTS[robots].items():
            var = "DINGTALK_" + channel.split("-")[0].upper()
            written |= {f"{var}_URL": bots[channel].url(access), f"{var}_SECRET": SECRET}
        lines = env_file.read_text().splitlines()
        keys = [k for k in keys_of(lines) if k]
        assert sorted(keys) == sorted(written), keys  # the shipped file names exactly what the relay reads
        env_file.write_text(
            "".join(
                f"{k}={written[k]}\n" if k in written else f"{ln}\n"
                for ln, k in zip(lines, keys_of(lines), strict=True)
            )
        )
        # the settings a test cannot keep: free ports, the simulated fleet instead of detection
        exporter_port, prom_port = free_port(), free_port()
        if robots == 2:
            _second_robot(etc / "xpuwatch" / "relay.yaml")
        relay_conf = yaml.safe_load((etc / "xpuwatch" / "relay.yaml").read_text())
        assert set(relay_conf["channels"]) == set(ROBOTS[robots])
        relay_conf["listen_address"] = f"127.0.0.1:{root.relay}"
        (etc / "xpuwatch" / "relay.yaml").write_text(yaml.safe_dump(relay_conf))
        conf = yaml.safe_load((etc / "xpuwatch" / "exporter.yaml").read_text())
        assert conf["job_mapping"]["dir"] == "/run/xpuwatch/jobs"
        scenario = {
            "seed": 5,
            "node": "gpu01",
            "poll_interval": 1,
            "timeline_start": "first_scrape",  # the fault is a step Prometheus sees, however late it scrapes
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
        _write_prometheus_yml(root, exporter_port)
        root.run("site spec")
        _edit_site_spec(root, robots)
        for name in ("prometheus rules", "alertmanager token", "alertmanager config"):
            root.run(name)
        am_config = etc / "prometheus" / "alertmanager.yml"
        _assert_every_receiver_posts_to_a_relay_channel(root, am_config)
        assert "remediat" not in am_config.read_text()
        assert "alert: XpuwatchRemediation" not in (etc / "prometheus" / "xpuwatch" / "rules.yml").read_text()
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
                    f"--config.file={am_config}",
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
        relay = f"http://127.0.0.1:{root.relay}"

        def diagnose() -> str:
            out = []
            for what, url in (("targets", f"{prom}/api/v1/targets"), ("alerts", f"{prom}/api/v1/alerts")):
                try:
                    out.append(f"{what}: {json.dumps(_get(url))[:3000]}")
                except OSError as exc:
                    out.append(f"{what}: {exc}")
            out += [f"dingtalk {channel} answers {bot.answers}" for channel, bot in bots.items()]
            out += [p.read_text()[-2000:] for p in tmp_path.glob("*.service.log")]
            return "\n".join(out)

        def up(job: str) -> bool:
            try:
                result = _get(f"{prom}/api/v1/query?query=up%7Bjob%3D%22{job}%22%7D")["data"]["result"]
            except OSError:
                return False
            return bool(result) and all(r["value"][1] == "1" for r in result)

        await _until(lambda: up("xpuwatch") and up("xpuwatch-relay"), 60, "both scrape jobs up", diagnose)
        await _until(lambda: _amtool_ready(am), 30, "Alertmanager", diagnose)
        # the test page, as the guide sends it: every hop of every category answers ok
        # --timeout: on a loaded shared machine a minute beyond the shortened group_wait can pass before the
        # relay has stored anything; the command returns as soon as every hop has answered
        page = await asyncio.to_thread(root.run, "test page", " --timeout 600")
        print(page.stdout)  # the output the guide shows (pytest -s)
        rows = [line.split(None, 3) for line in page.stdout.splitlines()[1:]]
        assert (
            page.stdout.startswith("test page ")
            and f"through Alertmanager {am}" in page.stdout.splitlines()[0]
        )
        assert sorted((c, hop, ok) for c, hop, ok, _ in rows) == sorted(
            (c, hop, "ok")
            for c in ("hardware", "performance", "meta")
            for hop in ("alertmanager", "relay", "bot")
        ), page.stdout
        team = "team-dingtalk" if robots == 2 else "ops-dingtalk"
        expect = {"hardware": "ops-dingtalk", "performance": team, "meta": team}
        for category, hop, _, text in rows:
            if hop == "bot":
                assert text.startswith(f"channel {expect[category]}: ") and "bot answered code 0" in text
        for category, channel in expect.items():  # the command waited for these answers: they are there
            assert any(f"XpuwatchTestPage{category.title()}" in t for t in _texts(bots[channel])), category
        # an alert of the generated rules: the simulated card's uncorrectable ECC error pages the on-call group
        await _until(
            lambda: any("AcceleratorEccUncorrectable" in t for t in _texts(bots["ops-dingtalk"])),
            120,
            "AcceleratorEccUncorrectable at DingTalk",
            diagnose,
        )
        if robots == 2:
            assert not any("AcceleratorEccUncorrectable" in t for t in _texts(bots["team-dingtalk"]))
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
        # nothing failed on the way, so nothing pages about itself: every notification Alertmanager sent was
        # taken by the relay, every message the relay sent was taken by its robot, signed as the robot requires
        assert _metric_total(f"{am}/metrics", "alertmanager_notifications_total") >= 4
        assert _metric_total(f"{am}/metrics", "alertmanager_notifications_failed_total") == 0
        assert _metric_total(f"{relay}/metrics", C.RELAY_REJECTED.name) == 0
        assert _metric_total(f"{relay}/metrics", C.RELAY_FAILED.name) == 0
        for bot in bots.values():
            assert bot.codes() and set(bot.codes()) == {"0"}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for bot in bots.values():
            await bot.stop()


def _amtool_ready(am: str) -> bool:
    try:
        with urllib.request.urlopen(f"{am}/-/ready", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _route(config: Path, labels: list[str]) -> str:
    """The receivers ``amtool config routes test`` picks for an alert of these labels."""
    r = subprocess.run(
        ["amtool", "config", "routes", "test", f"--config.file={config}", *labels],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


# Alerts of the site's own (Debian's example tree, the hand-written one) and of xpuwatch, for the merge test.
SITE_ALERTS = [
    ["alertname=NodeDown", "severity=critical"],
    ["alertname=DiskFull", "severity=warning", "team=db"],
    ["alertname=DiskFailing", "category=hardware", "severity=critical"],  # another mixin's category label
    ["alertname=Slow", "service=database", "owner=team-X"],
    ["alertname=Broken", "service=files", "severity=critical"],
    ["alertname=Other"],
]
XPUWATCH_ALERTS = [
    ["alertname=AcceleratorEccUncorrectable", "category=hardware", "severity=critical", "action=drain"],
    ["alertname=AcceleratorLowUtilization", "category=performance", "severity=warning", "action=none"],
    ["alertname=XpuwatchTestPageMeta", "category=meta", "severity=critical", "action=none"],
]


@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("amtool") and shutil.which("promtool")),
    reason="Debian's amtool and promtool are required",
)
@pytest.mark.parametrize("existing", sorted(EXISTING))
def test_the_guide_merges_xpuwatch_into_an_existing_alertmanager(root: Root, existing: str) -> None:
    own = EXISTING[existing]
    if not own.exists():
        pytest.skip(f"{own} is not installed here")
    etc = root.path / "etc" / "prometheus"
    (root.path / "etc" / "xpuwatch").mkdir(parents=True)
    (root.path / "etc" / "xpuwatch" / "relay.yaml").write_text(
        (SYSTEMD / "etc/xpuwatch/relay.yaml").read_text()
    )
    _write_prometheus_yml(root, free_port())
    shutil.copy(own, etc / "alertmanager.yml")
    root.run("site spec")
    root.run("prometheus rules")
    root.run("alertmanager config merged into yours")
    merged = etc / "alertmanager.yml"
    assert (etc / "alertmanager-own.yml").read_bytes() == own.read_bytes()
    # the next run (an upgrade, a changed site.yaml) merges into the kept file again, not into its own output
    root.run("alertmanager config merged into yours")
    assert (etc / "alertmanager-own.yml").read_bytes() == own.read_bytes()
    assert merged.read_bytes() == (etc / "xpuwatch" / "alertmanager-merged.yml").read_bytes()
    config = yaml.safe_load(merged.read_text())
    mine = yaml.safe_load(own.read_text())
    added = [r for r in config["receivers"] if r["name"] not in {m["name"] for m in mine["receivers"]}]
    assert sorted(r["name"] for r in added) == ["ops-dingtalk", "xpuwatch-meta"]
    _assert_every_receiver_posts_to_a_relay_channel(root, etc / "xpuwatch" / "alertmanager-fragment.yml")
    assert "remediat" not in merged.read_text()
    for labels in XPUWATCH_ALERTS:
        assert _route(merged, labels) == ("xpuwatch-meta" if "category=meta" in labels else "ops-dingtalk")
    for labels in SITE_ALERTS:  # the site's own alerts route as before the merge
        assert _route(merged, labels) == _route(own, labels), labels
    assert root.recorded().count("systemctl reload prometheus-alertmanager") == 2
