"""Prometheus conventions on every service, as real processes: ``--version``, ``xpuwatch_build_info``,
``process_*``/``python_*`` on /metrics, ``--log.level``/``--log.format`` (and $XPUWATCH_LOG_*), one config
error line; and the DaemonSet's probes against an exporter with TLS and basic auth on (components/web-config).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml

from tests.deploy.test_kustomize import render
from xpuwatch.exporter.logs import LogfmtFormatter, LogSettingsError, resolve

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.1.0"


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("XPUWATCH_")}
    return {**out, "PYTHONPATH": str(ROOT), **extra}


def xpuwatch(*args: str, **kw: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xpuwatch", *args],
        cwd=ROOT,
        env=env(**kw),
        capture_output=True,
        text=True,
        timeout=60,
    )


class Process:
    """A running `xpuwatch` subcommand; stderr and stdout lines are collected as they come."""

    def __init__(self, *args: str, **kw: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xpuwatch", *args],
            cwd=ROOT,
            env=env(**kw),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        for stream in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if m := re.search(pattern, line):
                    return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r}:\n" + "".join(self.lines))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for p in started:
        p.stop()


def get(
    url: str, headers: dict[str, str] | None = None, ctx: ssl.SSLContext | None = None
) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def check_standard_metrics(body: str) -> None:
    m = re.search(r"^xpuwatch_build_info\{([^}]*)\} 1\.0$", body, re.M)
    assert m, "no xpuwatch_build_info"
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
    assert labels["version"] == VERSION and labels["revision"] not in ("",)
    assert labels["python_version"] == ".".join(map(str, sys.version_info[:3]))
    for family in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"):
        value = re.search(rf"^{family} (\S+)$", body, re.M)
        assert value and float(value.group(1)) > 0, family
    assert re.search(r'^python_info\{.*implementation="CPython"', body, re.M)
    assert "python_gc_collections_total" in body


# --- version ----------------------------------------------------------------------------------------------


def test_version_names_version_revision_and_python() -> None:
    res = xpuwatch("--version", XPUWATCH_BUILD_REVISION="abc1234")
    assert res.returncode == 0
    assert res.stdout.splitlines()[0] == f"xpuwatch, version {VERSION} (revision: abc1234)"
    assert f"python version: {'.'.join(map(str, sys.version_info[:3]))}" in res.stdout


# --- logs -------------------------------------------------------------------------------------------------


def test_log_settings_resolve_flag_then_env_then_default() -> None:
    assert resolve(None, None, {}) == ("info", "logfmt")
    assert resolve(None, None, {"XPUWATCH_LOG_LEVEL": "debug", "XPUWATCH_LOG_FORMAT": "json"}) == (
        "debug",
        "json",
    )
    assert resolve("error", "logfmt", {"XPUWATCH_LOG_LEVEL": "debug", "XPUWATCH_LOG_FORMAT": "json"}) == (
        "error",
        "logfmt",
    )
    assert resolve("warning", None, {}) == ("warn", "logfmt")  # the old --log-level spelling
    with pytest.raises(LogSettingsError, match="XPUWATCH_LOG_FORMAT: 'xml' is not one of logfmt, json"):
        resolve(None, None, {"XPUWATCH_LOG_FORMAT": "xml"})


def test_logfmt_quotes_and_escapes_values() -> None:
    import logging

    record = logging.LogRecord("relay", logging.WARNING, "f.py", 1, 'bad "x" = %s', ("a\nb",), None)
    record.created, record.msecs = 1700000000.0, 5.0
    line = LogfmtFormatter().format(record)
    assert line == 'ts=2023-11-14T22:13:20.005Z level=warn logger=relay msg="bad \\"x\\" = a\\nb"'


@pytest.mark.slow
@pytest.mark.parametrize("command", ["serve", "relay", "remediate", "metrics-doc"])
def test_log_flags_on_every_subcommand(command: str) -> None:
    res = xpuwatch(command, "--log.level=loud", "--help")
    # argparse accepts the flag on the subcommand; --help exits before the value is checked
    assert res.returncode == 0 and "--log.level" in res.stdout and "--log.format" in res.stdout
    res = xpuwatch(
        command, "--log.format=xml", *(["--config", "x.yaml"] if command in ("relay", "remediate") else [])
    )
    assert res.returncode == 2
    assert "xpuwatch: config error: --log.format: 'xml' is not one of logfmt, json" in res.stderr


@pytest.mark.slow
def test_one_config_error_line_across_services(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("nonsense_key: 1\n")
    for command in ("serve", "relay", "remediate"):
        res = xpuwatch(command, "--config", str(tmp_path / "bad.yaml"))
        assert res.returncode == 2, (command, res.stderr)
        lines = [line for line in res.stderr.splitlines() if line]
        assert len(lines) == 1 and lines[0].startswith("xpuwatch: config error: "), (command, res.stderr)
        assert "nonsense_key" in lines[0] and "Traceback" not in res.stderr


# --- /metrics of each service -----------------------------------------------------------------------------


@pytest.mark.slow
def test_exporter_serves_build_info_and_process_metrics_with_json_logs(processes: list[Process]) -> None:
    exp = Process("serve", "--simulate", "--web.listen-address", "127.0.0.1:0", "--log.format=json")
    processes.append(exp)
    url = exp.wait_for(r'"msg": "listening on (http://[^/\s]+)')[1]
    deadline = time.monotonic() + 30
    while get(url + "/readyz")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.2)  # /readyz: 503 until the first poll (a loaded machine polls late)
    status, body = get(url + "/metrics")
    assert status == 200
    check_standard_metrics(body)
    assert re.search(r"^accelerator_up\{", body, re.M)  # the device series are still there
    promtool = shutil.which("promtool")
    assert promtool
    res = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    logs = [json.loads(line) for line in exp.lines if line.startswith("{")]
    assert logs and all({"ts", "level", "logger", "msg"} <= set(doc) for doc in logs)


@pytest.mark.slow
def test_relay_serves_build_info_and_process_metrics(tmp_path: Path, processes: list[Process]) -> None:
    (tmp_path / "token").write_text("t")
    cfg = {
        "auth": {"bearer_token_file": "token"},
        "outbox": str(tmp_path / "outbox.sqlite"),
        "channels": {"oncall-wecom": {"type": "wecom", "webhook_url_env": "WECOM_URL"}},
    }
    (tmp_path / "relay.yaml").write_text(yaml.safe_dump(cfg))
    relay = Process(
        "relay",
        "--config",
        str(tmp_path / "relay.yaml"),
        "--web.listen-address",
        "127.0.0.1:0",
        XPUWATCH_LOG_LEVEL="debug",
        WECOM_URL="http://127.0.0.1:9/x",
    )
    processes.append(relay)
    host, port = relay.wait_for(r"relay listening on ([\d.]+):(\d+)").groups()
    status, body = get(f"http://{host}:{port}/metrics")
    assert status == 200
    check_standard_metrics(body)
    assert "xpuwatch_relay_queue_depth" in body


# --- probes with TLS and basic auth (components/web-config) ------------------------------------------------


@pytest.mark.slow
def test_probes_work_with_tls_and_basic_auth(tmp_path: Path, processes: list[Process]) -> None:
    from tests.exporter.test_server import self_signed

    ds = next(o for o in render("overlays/kube-prometheus-stack") if o["metadata"]["name"].endswith("-amd"))
    ctr = ds["spec"]["template"]["spec"]["containers"][0]
    web_env = next(e["value"] for e in ctr["env"] if e["name"] == "XPUWATCH_WEB_CONFIG_FILE")
    # the Secret's files, laid out where the component mounts them
    web = tmp_path / Path(web_env).relative_to("/")
    web.parent.mkdir(parents=True)
    cert, key = self_signed(web.parent)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    web.write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {"cert_file": cert.name, "key_file": key.name},
                "basic_auth_users": {"prometheus": hashed},
            }
        )
    )
    exp = Process(
        "serve", "--simulate", "--web.listen-address", "127.0.0.1:0", XPUWATCH_WEB_CONFIG_FILE=str(web)
    )
    processes.append(exp)
    base = exp.wait_for(r"listening on (https://[^/\s]+)")[1]
    kubelet = ssl.create_default_context()
    kubelet.check_hostname, kubelet.verify_mode = (
        False,
        ssl.CERT_NONE,
    )  # kubelet HTTPS probes skip verification
    for kind in ("readinessProbe", "livenessProbe"):
        probe = ctr[kind]["httpGet"]
        assert probe["scheme"] == "HTTPS"
        deadline = time.monotonic() + 30
        while (status := get(base + probe["path"], ctx=kubelet)[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.2)  # /readyz: 503 until the first poll
        assert status == 200, f"{kind} {probe['path']} answered {status}"
    assert get(base + "/metrics", ctx=kubelet)[0] == 401
    auth = {"Authorization": "Basic " + base64.b64encode(b"prometheus:s3cret").decode()}
    status, body = get(base + "/metrics", auth, ctx=kubelet)
    assert status == 200 and "accelerator_up" in body


# --- exporter-toolkit http_server_config ------------------------------------------------------------------


def test_http_server_config_is_accepted_and_checked() -> None:
    from xpuwatch.exporter.settings import ConfigError, parse_web_config

    wc = parse_web_config(
        {
            "http_server_config": {
                "http2": True,
                "headers": {"x-frame-options": "deny", "X-Content-Type-Options": "nosniff"},
            }
        }
    )
    assert dict(wc.headers) == {"X-Frame-Options": "deny", "X-Content-Type-Options": "nosniff"}
    with pytest.raises(ConfigError, match=r"http_server_config\.headers\.Server: not one of"):
        parse_web_config({"http_server_config": {"headers": {"Server": "x"}}})
    with pytest.raises(ConfigError, match=r"http_server_config\.htpp2: unknown key"):
        parse_web_config({"http_server_config": {"htpp2": True}})


async def test_http_server_config_headers_on_every_response() -> None:
    import aiohttp

    from tests.exporter.test_server import GoodBackend, build, started
    from xpuwatch.exporter.settings import parse_web_config

    h = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    wc = parse_web_config(
        {
            "basic_auth_users": {"p": h},
            "http_server_config": {"headers": {"Strict-Transport-Security": "max-age=60"}},
        }
    )
    server, poller = build([GoodBackend()], wc)
    url = await started(server, poller)
    try:
        async with aiohttp.ClientSession() as s:
            for path in ("/metrics", "/healthz"):  # a 401 and an unauthenticated 200
                async with s.get(url + path) as r:
                    assert r.headers["Strict-Transport-Security"] == "max-age=60", path
                    assert r.status == (401 if path == "/metrics" else 200)
    finally:
        poller.stop()
        await server.stop()
