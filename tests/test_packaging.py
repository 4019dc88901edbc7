"""The wheel installs one top-level name, ``xpuwatch``, and lives beside other distributions' ``report`` and
``deploy`` packages (issue 31): built with pip from this checkout, installed into a fresh target directory
that already holds two such packages, then run as ``python -m xpuwatch``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.conftest import copy_source

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "nvidia"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    src = copy_source(tmp_path_factory.mktemp("src"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        text=True,
    )
    (whl,) = out.glob("xpuwatch-*.whl")
    return whl


@pytest.mark.slow
def test_the_wheel_has_one_top_level_name(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
        (top_level,) = (n for n in names if n.endswith(".dist-info/top_level.txt"))
        listed = zf.read(top_level).decode().split()
    assert top == {"xpuwatch"} and listed == ["xpuwatch"]
    # real files, not links, and every room with its data files
    for path in (
        "xpuwatch/__main__.py",
        "xpuwatch/exporter/server.py",
        "xpuwatch/vendors/sim_default.yaml",
        "xpuwatch/alerts/spec.yaml",
        "xpuwatch/alerts/relay/server.py",
        "xpuwatch/dashboards/generator.py",
        "xpuwatch/remediation/policy.py",
        "xpuwatch/deploy/demo_scenario.yaml",
        "xpuwatch/report/cli.py",
        "xpuwatch/exporter/podresources/api_pb2.py",
    ):
        assert path in names, path


@pytest.mark.slow
def test_installs_beside_other_report_and_deploy_packages(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    for other in ("report", "deploy"):  # two other distributions' generic names, installed first
        (site / other).mkdir(parents=True)
        (site / other / "__init__.py").write_text(f"WHO = 'the other {other}'\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert {p.name for p in site.iterdir() if not p.name.endswith(".dist-info")} == {
        "report",
        "deploy",
        "xpuwatch",
        "bin",
    }
    # run from an empty directory with only the target on the path: nothing of this checkout is importable
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    check = (
        "import report, deploy, xpuwatch.report.cli, xpuwatch.deploy.demo; "
        f"print(report.WHO, deploy.WHO, xpuwatch.report.cli.__file__.startswith({str(site)!r}))"
    )
    res = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {check}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.stdout.split("\n")[0] == "the other report the other deploy True", res.stderr
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "xpuwatch",
            "inspect",
            "--node-name",
            "n1",
            str(FIXTURE / "nvidia-smi_q_x_tesla-t4_515.105.01.xml"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert 'accelerator_memory_total_bytes{device="0",model="Tesla T4"' in res.stdout


@pytest.mark.slow
def test_the_readme_s_first_command_from_the_wheel(wheel: Path, tmp_path: Path) -> None:
    """`xpuwatch serve --simulate` from the installed wheel alone (the README's first command): the built-in
    fleet and its data files load from the package, and /metrics answers with every simulated device."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "xpuwatch", "serve", "--simulate", "--web.listen-address", "127.0.0.1:0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        log = []
        for line in proc.stderr:  # ends when the process exits
            log.append(line)
            if m := re.search(r"listening on (http://[^/\s]+)", line):
                url = m.group(1)
                break
        else:
            raise AssertionError("".join(log))
        body = ""
        for _ in range(
            600
        ):  # the first poll lands within a second or two; up to a minute on a loaded machine
            with urllib.request.urlopen(f"{url}/metrics", timeout=30) as r:
                body = r.read().decode()
            if "accelerator_up{" in body:
                break
            time.sleep(0.1)
        ups = re.findall(r"^accelerator_up\{.*\} (\S+)$", body, re.M)
        assert len(ups) == 18, body[:2000]  # the README: 18 devices of 11 models
    finally:
        proc.terminate()
        proc.wait(10)
