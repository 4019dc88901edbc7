"""Every container of every kustomize overlay, started on paper: its exact args and env (downward API and
``$(VAR)`` expansion done as the kubelet does) go through the component's own argument parser and settings
loader, with its ConfigMaps and Secrets laid out where the pod mounts them.

Catches manifests that Kubernetes accepts but the program misreads: an env var the code never reads
(``XPUWATCH_BACKENDS`` while the loader reads ``XPUWATCH_ENABLE``: the exporter starts with no backend), a
probe on a port the process does not listen on, a ``$(VAR)`` used before it is defined, a tool or library
directory in PATH / LD_LIBRARY_PATH that nothing mounts.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_kustomize import KUSTOMIZE, ROOT, render
from xpuwatch.entry import build_parser

OVERLAYS = sorted(
    p.parent.relative_to(KUSTOMIZE).as_posix()
    for p in KUSTOMIZE.glob("*/*/kustomization.yaml")
    if yaml.safe_load(p.read_text()).get("kind") == "Kustomization"
)

# What each exporter DaemonSet is for: the backends it must enable.
INTENT: dict[str, tuple[str, ...]] = {
    "xpuwatch-exporter-nvidia": ("nvml", "dcgm"),
    "xpuwatch-exporter-amd": ("amd",),
    "xpuwatch-exporter-ascend": ("ascend",),
    "xpuwatch-exporter-cambricon": ("cambricon",),
    "xpuwatch-exporter-hygon": ("hygon",),
    "xpuwatch-exporter-kunlunxin": ("kunlunxin",),
    "xpuwatch-exporter-metax": ("metax",),
    "xpuwatch-exporter-mthreads": ("mthreads",),
    "xpuwatch-exporter-iluvatar": ("iluvatar",),
    "xpuwatch-exporter-enflame": ("enflame",),
}
# backends.dcgm.host the NVIDIA exporter must end up with, per overlay (default: embedded DCGM).
DCGM_HOST = {"overlays/nvidia-hostengine": "10.0.0.7:5555"}

# Variables set in manifests that no xpuwatch settings loader reads, and who does. A file means "the code
# reads it there" (checked below); otherwise the reader is outside xpuwatch.
OTHER_READERS: dict[str, str | None] = {
    "POD_NAME": "remediation/settings.py",  # Lease holder identity
    "PATH": "vendors/command.py",  # where vendor tools are looked up
    "LD_LIBRARY_PATH": None,  # the dynamic loader: vendor libraries (libdcmi, libcndev, ...) via ctypes
    "NVIDIA_VISIBLE_DEVICES": None,  # NVIDIA container toolkit: which GPUs to inject
    "NVIDIA_DRIVER_CAPABILITIES": None,  # NVIDIA container toolkit: which driver libraries to inject
    "NVIDIA_MIG_MONITOR_DEVICES": None,  # NVIDIA container toolkit: MIG monitoring access
    "ENFLAME_VISIBLE_DEVICES": None,  # Enflame container runtime (its gcu-exporter DaemonSet sets it)
    "NODE_IP": None,  # only expanded by the kubelet into XPUWATCH_DCGM_HOST
}
STANDARD_PATH = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
DOWNWARD = {"spec.nodeName": "node-a", "status.hostIP": "10.0.0.7", "metadata.name": "pod-x"}


class RecordingEnv(dict[str, str]):
    """An environment that remembers which variables the code looked up."""

    def __init__(self, values: Mapping[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def container_env(env: list[dict[str, Any]]) -> dict[str, str]:
    """The process environment the kubelet builds: downward API values, ``$(VAR)`` expanded only from
    variables defined earlier in the list (an undefined reference stays literal, which is a bug here)."""
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    out: dict[str, str] = {}
    for e in env:
        if "valueFrom" in e:
            ref = e["valueFrom"]
            value = DOWNWARD[ref["fieldRef"]["fieldPath"]] if "fieldRef" in ref else "from-" + next(iter(ref))
        else:
            value = re.sub(r"\$\((\w+)\)", lambda m: out.get(m.group(1), m.group(0)), e.get("value", ""))
        assert "$(" not in value, f"{e['name']}: {value!r} references a variable not defined before it"
        out[e["name"]] = value
    return out


@dataclass
class Pod:
    """One container of a rendered workload, with its volumes laid out under ``root``."""

    workload: dict[str, Any]
    container: dict[str, Any]
    env: RecordingEnv
    root: Path

    @property
    def name(self) -> str:
        return str(self.workload["metadata"]["name"])

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.workload["spec"]["template"]["spec"])

    def port(self, name: str) -> int:
        return next(int(p["containerPort"]) for p in self.container["ports"] if p["name"] == name)

    def local(self, path: str) -> str:
        """A path inside the container -> where this test laid it out."""
        return str(self.root / path.lstrip("/"))

    def args(self) -> list[str]:
        """Container args with absolute paths under a mount rewritten to the local layout."""
        return [localise(a, self.container, self.root) for a in self.container.get("args", [])]


def localise(text: str, ctr: dict[str, Any], root: Path) -> str:
    """Rewrite paths under the container's mounts (in args or config files) to where the test laid them out."""
    mounts = sorted((m["mountPath"] for m in ctr.get("volumeMounts", [])), key=len, reverse=True)
    if not mounts:
        return text
    pattern = "|".join(re.escape(mp) for mp in mounts)
    return re.sub(rf"(?<![\w/.-])({pattern})(?=/|\s|$)", lambda m: str(root) + m.group(1), text)


def _lay_out(objs: list[dict[str, Any]], workload: dict[str, Any], ctr: dict[str, Any], root: Path) -> None:
    """Write each ConfigMap/Secret volume's keys where the container mounts it (Secrets get dummy values)."""
    data = {(o["kind"], o["metadata"]["name"]): o.get("data", {}) for o in objs if o["kind"] == "ConfigMap"}
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    for m in ctr.get("volumeMounts", []):
        vol = volumes[m["name"]]
        target = root / m["mountPath"].lstrip("/")
        if "configMap" in vol:
            items = data[("ConfigMap", vol["configMap"]["name"])]
            assert items, f"{workload['metadata']['name']}: ConfigMap {vol['configMap']['name']} not rendered"
        elif "secret" in vol:
            items = {
                k: ("https://example.invalid/hook" if k.endswith("url") else "s3cret")
                for k in (
                    "inbound-token",
                    "relay-token",
                    "oncall-wecom-url",
                    "team-feishu-url",
                    "team-feishu-secret",
                )
            }
        else:
            target.mkdir(parents=True, exist_ok=True)
            continue
        items = {k: localise(v, ctr, root) for k, v in items.items()}
        if "subPath" in m:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(items[m["subPath"]])
        else:
            target.mkdir(parents=True, exist_ok=True)
            for k, v in items.items():
                (target / k).write_text(v)


@functools.cache
def _rendered(overlay: str) -> str:
    objs = render(overlay)
    if overlay.startswith("exporters/"):  # a DaemonSet alone: ConfigMaps and monitors come with ../../base
        objs += [o for o in render("base") if o["kind"] in ("ConfigMap", "ServiceMonitor")]
    return json.dumps(objs)


def rendered(overlay: str) -> list[dict[str, Any]]:
    """The overlay's objects (a fresh copy: tests may alter them)."""
    return list(json.loads(_rendered(overlay)))


def pods(overlay: str, tmp: Path) -> Iterator[Pod]:
    objs = rendered(overlay)
    for o in objs:
        if o["kind"] not in ("DaemonSet", "Deployment"):
            continue
        for ctr in o["spec"]["template"]["spec"]["containers"]:
            root = tmp / o["metadata"]["name"] / ctr["name"]
            _lay_out(objs, o, ctr, root)
            yield Pod(o, ctr, RecordingEnv(container_env(ctr.get("env", []))), root)


def check_env_is_read(pod: Pod) -> None:
    """Every variable the manifest sets is one the loader looked up, or has a known reader."""
    for name in pod.env:
        if name in pod.env.read:
            continue
        assert not name.startswith("XPUWATCH_"), (
            f"{pod.name}: sets {name}, which xpuwatch never reads (misspelt or renamed setting?)"
        )
        assert name in OTHER_READERS, f"{pod.name}: sets {name}; nothing is known to read it"
        reader = OTHER_READERS[name]
        if reader:
            assert name in (ROOT / reader).read_text(), f"{name}: {reader} no longer reads it"


def check_probes(pod: Pod, listen_port: int, unauthenticated: frozenset[str]) -> None:
    for kind in ("readinessProbe", "livenessProbe"):
        get = pod.container[kind]["httpGet"]
        port = get["port"] if isinstance(get["port"], int) else pod.port(get["port"])
        assert port == listen_port, f"{pod.name}: {kind} probes {port}, the process listens on {listen_port}"
        assert get["path"] in unauthenticated, f"{pod.name}: {kind} {get['path']} needs credentials"


# --- the exporter ---------------------------------------------------------------------------------------


def exporter_settings(pod: Pod) -> Any:
    from xpuwatch.exporter.cli import run_serve, serve_settings
    from xpuwatch.exporter.logs import resolve
    from xpuwatch.exporter.settings import load_web_config

    args = build_parser().parse_args(pod.args())
    assert args.func is run_serve, f"{pod.name}: does not run `serve`"
    resolve(getattr(args, "log_level", None), getattr(args, "log_format", None), pod.env)
    settings, node = serve_settings(args, pod.env)
    if settings.web.config_file:
        path = settings.web.config_file
        mounted = [m["mountPath"] for m in pod.container["volumeMounts"]]
        assert any(path.startswith(mp + "/") for mp in mounted), f"{pod.name}: {path} is not mounted"
        assert load_web_config  # the file itself comes from the user's Secret (components/web-config)
    assert node == "node-a", f"{pod.name}: node label {node!r} is not the pod's node"
    return settings


def check_tool_paths(pod: Pod) -> None:
    """PATH and LD_LIBRARY_PATH name only the image's standard directories or mounted host directories."""
    mounts = [m["mountPath"] for m in pod.container.get("volumeMounts", [])]
    for var in ("PATH", "LD_LIBRARY_PATH"):
        for entry in filter(None, pod.env.get(var, "").split(":")):
            if var == "PATH" and entry in STANDARD_PATH:
                continue
            assert any(entry == mp or entry.startswith(mp + "/") for mp in mounts), (
                f"{pod.name}: {var} entry {entry} is not a mounted directory"
            )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_starts_as_its_overlay_intends(
    overlay: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from xpuwatch.exporter.server import UNAUTHENTICATED_PATHS

    seen = 0
    for pod in pods(overlay, tmp_path):
        seen += 1
        monkeypatch.setattr(os, "environ", pod.env)  # code that reads os.environ directly sees the pod's
        if pod.name.startswith("xpuwatch-exporter-"):
            s = exporter_settings(pod)
            assert s.enable == INTENT[pod.name], f"{overlay}: {pod.name} enables {s.enable}"
            host, port = s.web.host_port
            assert host == "" and port == pod.port("metrics")
            check_probes(pod, port, UNAUTHENTICATED_PATHS)
            check_tool_paths(pod)
            if "dcgm" in s.enable:
                assert s.backend("dcgm").options["host"] == DCGM_HOST.get(overlay, "embedded")
            monitors = [o for o in rendered(overlay) if o["kind"] == "ServiceMonitor"]
            paths = {e.get("path", "/metrics") for m in monitors for e in m["spec"]["endpoints"]}
            assert s.web.telemetry_path in paths
        elif pod.name == "xpuwatch-relay":
            check_relay(pod)
        elif pod.name == "xpuwatch-remediation":
            check_remediation(pod, overlay)
        else:
            pytest.fail(f"{overlay}: no expectations for {pod.name}; add them here")
        check_env_is_read(pod)
    assert seen, f"{overlay}: no workload rendered"


def check_relay(pod: Pod) -> None:
    from xpuwatch.alerts.relay.cli import run, split_address
    from xpuwatch.alerts.relay.config import load_settings
    from xpuwatch.alerts.relay.server import check_settings

    args = build_parser().parse_args(pod.args())
    assert args.func is run
    settings = load_settings(args.config, env=pod.env)
    check_settings(settings)
    _, port = split_address(args.listen_address or settings.listen_address)
    assert port == pod.port("http")
    check_probes(pod, port, frozenset({"/healthz", "/readyz"}))


def check_remediation(pod: Pod, overlay: str) -> None:
    from xpuwatch.remediation.cli import effective, run
    from xpuwatch.remediation.settings import load

    args = build_parser().parse_args(pod.args())
    assert args.func is run
    settings = effective(load(args.config), args.apply, args.listen)
    assert settings.webhook.listen_port == pod.port("http")
    assert settings.guard.dry_run is (overlay != "overlays/apply"), overlay
    assert settings.leader.identity == "pod-x"  # POD_NAME from the downward API
    check_probes(pod, settings.webhook.listen_port, frozenset({"/healthz", "/readyz"}))


def test_every_vendor_daemonset_is_in_the_mixed_overlay(tmp_path: Path) -> None:
    names = {p.name for p in pods("overlays/mixed", tmp_path) if p.name.startswith("xpuwatch-exporter-")}
    assert names == set(INTENT)


# --- the checker itself catches the bugs it is for -------------------------------------------------------


def _broken(env: list[dict[str, Any]], tmp: Path) -> Pod:
    pod = next(p for p in pods("exporters/ascend", tmp) if p.name == "xpuwatch-exporter-ascend")
    drop = {"XPUWATCH_ENABLE"} | {e["name"] for e in env}
    pod.container["env"] = [e for e in pod.container["env"] if e["name"] not in drop] + env
    pod.env = RecordingEnv(container_env(pod.container["env"]))
    return pod


def test_checker_rejects_an_env_var_the_code_does_not_read(tmp_path: Path) -> None:
    pod = _broken([{"name": "XPUWATCH_BACKENDS", "value": "ascend"}], tmp_path)
    s = exporter_settings(pod)
    assert s.enable == ()  # what the old manifests did: no backend at all
    with pytest.raises(AssertionError, match="sets XPUWATCH_BACKENDS, which xpuwatch never reads"):
        check_env_is_read(pod)


def test_checker_rejects_a_variable_used_before_it_is_defined() -> None:
    with pytest.raises(AssertionError, match="not defined before it"):
        container_env(
            [
                {"name": "XPUWATCH_DCGM_HOST", "value": "$(NODE_IP):5555"},
                {"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            ]
        )


def test_checker_rejects_an_unmounted_library_dir(tmp_path: Path) -> None:
    pod = _broken(
        [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/Ascend/driver/lib64:/opt/nowhere/lib"}], tmp_path
    )
    with pytest.raises(AssertionError, match="/opt/nowhere/lib is not a mounted directory"):
        check_tool_paths(pod)
