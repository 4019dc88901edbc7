"""Optional dependency groups (pyproject extras): a node image without `nvidia` or `kubernetes` still runs
every other part, and a setting that needs a missing extra says which `pip install 'xpuwatch[...]'` brings it.

Each case runs the real CLI in a subprocess whose import system refuses the extra's modules, as on a
machine where they were never installed (e.g. the Ascend image has no NVML, gRPC client or JupyterHub).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import copy_source

ROOT = Path(__file__).resolve().parents[2]
NVIDIA = ("pynvml",)
KUBERNETES = ("grpc", "google.protobuf", "kubernetes_asyncio")
EVERY_EXTRA = (*NVIDIA, *KUBERNETES, "jupyterhub")

# Blocks importing the named top-level modules (and their submodules) before anything else runs.
BLOCKER = """
import sys
from importlib.abc import MetaPathFinder
BLOCKED = {blocked!r}
class Blocker(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
sys.argv = ["xpuwatch", *{argv!r}]
from xpuwatch.entry import main
main()
"""


def run_without(
    blocked: tuple[str, ...], *argv: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    code = BLOCKER.format(blocked=blocked, argv=list(argv))
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPUWATCH_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_core_dependencies_leave_vendor_and_kubernetes_clients_to_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    for dist in ("nvidia-ml-py", "grpcio", "protobuf", "kubernetes_asyncio", "jupyterhub"):
        assert dist not in core
    extras = project["optional-dependencies"]
    assert any(d.startswith("nvidia-ml-py") for d in extras["nvidia"])
    assert {d.split(">")[0] for d in extras["kubernetes"]} == {"grpcio", "protobuf", "kubernetes_asyncio"}
    assert "xpuwatch[all]" in extras["dev"]  # tests get everything


@pytest.mark.slow
def test_simulated_exporter_runs_without_any_extra(tmp_path: Path) -> None:
    """The README's first command (`serve --simulate`) and `inspect` of a real capture work after a plain
    `pip install .`."""
    fixture = ROOT / "tests" / "fixtures" / "ascend"
    capture = next(p for p in sorted(fixture.glob("npu-smi*info*.txt")))
    res = run_without(EVERY_EXTRA, "inspect", str(capture))
    assert res.returncode == 0, res.stderr
    assert "accelerator_up{" in res.stdout and 'vendor="huawei"' in res.stdout
    code = BLOCKER.format(
        blocked=EVERY_EXTRA, argv=["serve", "--simulate", "--web.listen-address", "127.0.0.1:0"]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPUWATCH_")}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # ends when the process exits
        seen.append(line)
        if "listening on http://" in line:
            break
    proc.terminate()
    seen.append(proc.communicate(timeout=20)[1])
    assert any("listening on http://" in line for line in seen), "".join(seen)
    assert "Traceback" not in "".join(seen)


@pytest.mark.slow
def test_pod_mapping_without_the_kubernetes_extra_names_it(tmp_path: Path) -> None:
    cfg = tmp_path / "exporter.yaml"
    cfg.write_text("pod_mapping: {enabled: true, kube_api: false}\n")
    res = run_without(KUBERNETES, "serve", "--simulate", "--config", str(cfg))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert (
        "xpuwatch: config error: pod_mapping.enabled: needs the Python module 'grpc', installed with "
        "pip install 'xpuwatch[kubernetes]'" in res.stderr
    )


@pytest.mark.slow
def test_nvml_without_the_nvidia_extra_names_it() -> None:
    res = run_without(NVIDIA, "capture", "--backend", "nvml", "-o", os.devnull)
    assert "Traceback" not in res.stderr, res.stderr
    assert "pip install 'xpuwatch[nvidia]'" in res.stdout + res.stderr


@pytest.mark.slow
def test_remediate_without_the_kubernetes_extra_names_it(tmp_path: Path) -> None:
    cfg = tmp_path / "remediate.yaml"
    cfg.write_text("webhook: {allow_unauthenticated: true, listen_port: 0}\n")
    res = run_without(KUBERNETES, "remediate", "--config", str(cfg))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "remediate: needs the Python module 'kubernetes_asyncio'" in res.stderr
    assert "pip install 'xpuwatch[kubernetes]'" in res.stderr


def test_dockerfile_targets_install_their_extras_and_copy_every_package() -> None:
    """Read, not built (no docker here): each image family installs its extra, the wheel stage copies every
    package pyproject ships, and every image a DaemonSet names has a target."""
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    stages = dict(
        re.findall(r"^FROM (?:--platform=\S+ )?\S+ AS (\w+)\n(.*?)(?=^FROM |\Z)", text, re.M | re.S)
    )
    assert set(stages) == {"wheel", "nvidia", "amd", "core"}
    assert list(stages)[-1] == "core"  # `docker build` without --target gives the core image
    # the pure-Python wheel is built once on the build machine, not under emulation per target platform
    assert re.search(r"^FROM --platform=\$BUILDPLATFORM \S+ AS wheel$", text, re.M)
    assert (
        "[nvidia,kubernetes]" in stages["nvidia"]
        and "pip install --no-cache-dir /opt/rocm/share/amd_smi" in stages["amd"]
    )
    assert "[kubernetes]" in stages["core"] and "nvidia" not in stages["core"]
    for name in ("nvidia", "amd", "core"):  # big /metrics bodies mmapped, not fragmenting the heap
        assert re.search(r"^ENV (.*\\\n)*\s*MALLOC_MMAP_THRESHOLD_=262144\b", stages[name], re.M), name
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"][
        "include"
    ]
    assert include == ["xpuwatch", "xpuwatch.*"]
    # xpuwatch/ links the rooms in: the image needs the package and every folder a link points to
    rooms = {p.resolve().name for p in (ROOT / "xpuwatch").iterdir() if p.is_symlink()}
    copied = set(re.findall(r"^COPY (\w+) \1$", stages["wheel"], re.M))
    assert copied == {"xpuwatch", *rooms}
    images = set(
        re.findall(
            r'value: "(xpuwatch[\w-]*)"',
            "".join(
                p.read_text()
                for p in (ROOT / "deploy" / "kustomize" / "exporters").glob("*/kustomization.yaml")
            ),
        )
    )
    assert images == {"xpuwatch-nvidia", "xpuwatch-amd"}  # the others keep the core image `xpuwatch`


DEMO_NEEDS = "pip install '.[kubernetes]' in the xpuwatch checkout"


@pytest.mark.slow
def test_demo_without_the_kubernetes_extra_says_so_before_starting_anything(tmp_path: Path) -> None:
    """The remediation child needs kubernetes_asyncio: the demo used to start everything and die 9.7 s in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPUWATCH_")}
    code = BLOCKER.format(blocked=KUBERNETES, argv=["demo", "--duration", "1"])
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and res.stdout == "", res.stdout + res.stderr
    assert "the Python module 'kubernetes_asyncio' (the remediation controller): " + DEMO_NEEDS in res.stderr
    assert list(tmp_path.iterdir()) == []  # no working directory: nothing started


@pytest.mark.slow
def test_demo_after_the_readme_install_names_every_missing_need(tmp_path: Path) -> None:
    """The README's `pip install .` (no extras) into a fresh venv, then `xpuwatch demo` on a PATH without
    Prometheus or Alertmanager: one message naming the extra and both Debian packages, exit 2, nothing
    started. The source is copied first so the build leaves nothing in the checkout."""
    src = copy_source(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPUWATCH_", "PYTHON", "VIRTUAL_ENV"))}
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-cache-dir", str(src)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    work = tmp_path / "work"
    work.mkdir()
    res = subprocess.run(
        [str(venv / "bin" / "xpuwatch"), "demo", "--duration", "1"],
        cwd=work,
        env={**env, "PATH": str(venv / "bin"), "TMPDIR": str(work)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout == "" and "Traceback" not in res.stderr, res.stdout + res.stderr
    assert res.stderr.startswith("xpuwatch demo: cannot start, nothing was started; missing:\n")
    assert DEMO_NEEDS in res.stderr
    assert "sudo apt-get install prometheus prometheus-alertmanager" in res.stderr
    assert list(work.iterdir()) == []
