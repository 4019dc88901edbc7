"""Reclaim against a REAL JupyterHub (PyPI ``jupyterhub``, Debian ``configurable-http-proxy``) on loopback.

The Hub runs as a subprocess with a service token scoped like jupyterhub-idle-culler's (``list:users``,
``read:users:activity``, ``read:servers``, ``delete:servers``) and a spawner whose "notebook" is
``tinyserver.py``. The controller's clock is injected (the Hub's clock is real, so the controller runs
a few minutes ahead of it); Kubernetes is the fake API server holding the notebook's pod.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.ports import free_port
from tests.remediation.kit import Clock, alerts_of, am_alert, make_controller, make_settings
from xpuwatch.remediation.alert import parse_time
from xpuwatch.remediation.jupyterhub import Hub
from xpuwatch.remediation.settings import ReclaimSettings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not shutil.which("configurable-http-proxy"), reason="configurable-http-proxy not installed"
    ),
]
SERVICE_TOKEN = "xpuwatch-reclaim-token-0123456789"
ADMIN_TOKEN = "test-admin-token-0123456789"


class HubProcess:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port, self.hub_port, self.proxy_port = free_port(), free_port(), free_port()
        self.api = f"http://127.0.0.1:{self.hub_port}/hub/api"
        tiny = Path(__file__).with_name("tinyserver.py")
        (root / "jupyterhub_config.py").write_text(
            f"""
from jupyterhub.spawner import LocalProcessSpawner

class TinySpawner(LocalProcessSpawner):
    def make_preexec_fn(self, name):
        return None
    def user_env(self, env):
        env["USER"] = self.user.name
        env["HOME"] = {str(root)!r}
        return env

c = get_config()  # noqa
c.JupyterHub.spawner_class = TinySpawner
c.Spawner.cmd = [{sys.executable!r}, {str(tiny)!r}]
c.Spawner.args = []
c.Spawner.start_timeout = 30
c.Spawner.http_timeout = 30
c.Spawner.notebook_dir = {str(root)!r}
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {self.port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {self.hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.proxy_port}"
c.ConfigurableHTTPProxy.auth_token = "proxy-token-0123456789"
c.ConfigurableHTTPProxy.command = [{shutil.which("configurable-http-proxy")!r}]
c.JupyterHub.db_url = "sqlite:///{root}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{root}/cookie_secret"
c.JupyterHub.pid_file = "{root}/jupyterhub.pid"
c.JupyterHub.last_activity_interval = 3600  # no proxy-route activity updates during a test
c.JupyterHub.services = [
    {{"name": "xpuwatch", "api_token": {SERVICE_TOKEN!r}}},
    {{"name": "tester", "api_token": {ADMIN_TOKEN!r}}},
]
c.JupyterHub.load_roles = [
    {{"name": "xpuwatch-reclaim", "services": ["xpuwatch"],
      "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]}},
    {{"name": "tester", "services": ["tester"], "scopes": ["admin:users", "admin:servers", "users:activity"]}},
]
"""
        )
        self.log = (root / "hub.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(root / "jupyterhub_config.py")],
            cwd=root,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # Debian's configurable-http-proxy requires its node modules from /usr/share/nodejs, which a
            # node binary not built by Debian does not search by itself.
            env={
                **os.environ,
                "NODE_PATH": os.pathsep.join(
                    filter(None, [os.environ.get("NODE_PATH"), "/usr/share/nodejs"])
                ),
            },
        )

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.api + path, data=data, method=method)
        req.add_header("Authorization", f"token {ADMIN_TOKEN}")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            return exc.code, None

    def wait_up(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.root / "hub.log").read_text()[-3000:])
            try:
                if self.call("GET", "/")[0] == 200:
                    return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError("hub did not start: " + (self.root / "hub.log").read_text()[-3000:])

    def spawn(self, user: str) -> datetime:
        """Create ``user``, start the default server, wait until ready; returns its last_activity."""
        self.call("POST", f"/users/{user}")
        code, _ = self.call("POST", f"/users/{user}/server")
        assert code in (201, 202), code
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, doc = self.call("GET", f"/users/{user}")
            server = (doc or {}).get("servers", {}).get("")
            if server and server.get("ready"):
                return parse_time(server["last_activity"], "last_activity")
            time.sleep(0.1)
        raise RuntimeError("server did not become ready: " + (self.root / "hub.log").read_text()[-3000:])

    def server(self, user: str) -> dict[str, Any] | None:
        _, doc = self.call("GET", f"/users/{user}")
        return (doc or {}).get("servers", {}).get("")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    h = HubProcess(tmp_path_factory.mktemp("hub"))
    try:
        h.wait_up()
        yield h
    finally:
        h.stop()


@pytest.fixture
async def relay() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """Captures what would reach the relay's channel endpoint (a v4 Alertmanager payload per notice)."""
    got: list[dict[str, Any]] = []

    async def receive(request: web.Request) -> web.Response:
        got.append(await request.json())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/alertmanager/team-feishu", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/alertmanager/team-feishu", got
    await runner.cleanup()


def idle_alert(user: str) -> dict[str, Any]:
    return am_alert(
        fingerprint=f"idle-{user}",
        alertname="AcceleratorIdleNotebook",
        category="performance",
        severity="warning",
        action="reclaim",
        node="gpu-0",
        uuid="GPU-1",
        namespace="jhub",
        pod=f"jupyter-{user}",
        container="notebook",
        workload_kind="notebook",
        owner=user,
    )


def reclaim_settings(relay_url: str):  # type: ignore[no-untyped-def]
    return make_settings(reclaim=ReclaimSettings(idle_seconds=600, grace_seconds=300), notify_url=relay_url)


async def test_idle_server_is_stopped_after_grace(hub, fake, kube, session, relay) -> None:
    relay_url, notices = relay
    started = hub.spawn("alice")
    fake.add_pod("jhub", "jupyter-alice", "gpu-0", {"nvidia.com/gpu": "1"})
    clock = Clock(started + timedelta(minutes=15))
    ctl = make_controller(
        reclaim_settings(relay_url), kube, session, clock, hub=Hub(session, hub.api, SERVICE_TOKEN)
    )
    res = await ctl.handle(alerts_of(idle_alert("alice")))
    assert res[0]["step"] == "notify" and res[0]["result"] == "ok", res
    assert len(notices) == 1
    note = notices[0]["alerts"][0]
    assert note["labels"]["owner"] == "alice"
    assert "will be stopped at" in note["annotations"]["description"]
    pod = fake.get("pods", "jupyter-alice", "jhub")
    assert pod["metadata"]["labels"]["xpuwatch.io/reclaim-pending"] == "true"  # type: ignore[index]
    clock.advance(299)
    assert await ctl.tick() == []
    assert hub.server("alice") is not None
    clock.advance(1)
    done = await ctl.tick()
    assert done[0]["result"] == "ok" and done[0]["detail"].startswith("stopped JupyterHub server alice/")
    deadline = time.monotonic() + 30  # a safety net, not a speed assertion
    while hub.server("alice") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert hub.server("alice") is None
    ann = fake.get("pods", "jupyter-alice", "jhub")["metadata"]["annotations"]  # type: ignore[index]
    assert json.loads(ann["xpuwatch.io/last-reclaim"])["result"] == "stopped"
    assert "ReclaimStopped" in [e["reason"] for e in fake.list("events")]


async def test_server_with_recent_activity_is_not_stopped(hub, fake, kube, session, relay) -> None:
    relay_url, notices = relay
    started = hub.spawn("bob")
    fake.add_pod("jhub", "jupyter-bob", "gpu-0", {"nvidia.com/gpu": "1"})
    clock = Clock(started + timedelta(minutes=5))
    ctl = make_controller(
        reclaim_settings(relay_url), kube, session, clock, hub=Hub(session, hub.api, SERVICE_TOKEN)
    )
    res = await ctl.handle(alerts_of(idle_alert("bob")))
    assert res[0]["result"] == "skipped" and res[0]["detail"] == "notebook active 300s ago"
    assert notices == []
    # Ten minutes later it is idle by the Hub: notice... then the user comes back before the deadline.
    clock.advance(600)
    res = await ctl.handle(alerts_of(am_alert(**{**idle_alert("bob")["labels"]}, fingerprint="idle-bob-2")))
    assert res[0]["step"] == "notify" and res[0]["result"] == "ok"
    back = started + timedelta(minutes=16)
    code, _ = hub.call(
        "POST",
        "/users/bob/activity",
        {
            "last_activity": back.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "servers": {"": {"last_activity": back.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}},
        },
    )
    assert code == 200
    clock.advance(300)
    done = await ctl.tick()
    assert done[0]["detail"].startswith("reclaim cancelled: activity resumed at ")
    assert hub.server("bob") is not None and hub.server("bob")["ready"]  # type: ignore[index]
    pod = fake.get("pods", "jupyter-bob", "jhub")
    assert "xpuwatch.io/reclaim" not in pod["metadata"]["annotations"]  # type: ignore[index]
    assert "xpuwatch.io/reclaim-pending" not in pod["metadata"]["labels"]  # type: ignore[index]


async def test_unreachable_hub_means_no_action(fake, kube, session, relay) -> None:
    relay_url, notices = relay
    fake.add_pod("jhub", "jupyter-carol", "gpu-0", {"nvidia.com/gpu": "1"})
    clock = Clock(datetime.now(UTC) + timedelta(hours=3))
    dead = Hub(session, f"http://127.0.0.1:{free_port()}/hub/api", SERVICE_TOKEN, timeout=2)
    ctl = make_controller(reclaim_settings(relay_url), kube, session, clock, hub=dead)
    res = await ctl.handle(alerts_of(idle_alert("carol")))
    assert res[0]["result"] == "blocked"
    assert res[0]["detail"].startswith("activity probe failed, not acting: hub unreachable")
    assert notices == []
    assert "annotations" not in fake.get("pods", "jupyter-carol", "jhub")["metadata"]  # type: ignore[index]
    assert ctl.telemetry.actions.labels("reclaim", "blocked", "apply")._value.get() == 0


async def test_hub_token_without_scopes_means_no_action(hub, fake, kube, session, relay) -> None:
    relay_url, notices = relay
    hub.spawn("dave")
    fake.add_pod("jhub", "jupyter-dave", "gpu-0", {"nvidia.com/gpu": "1"})
    clock = Clock(datetime.now(UTC) + timedelta(hours=3))
    ctl = make_controller(
        reclaim_settings(relay_url), kube, session, clock, hub=Hub(session, hub.api, "wrong-token")
    )
    res = await ctl.handle(alerts_of(idle_alert("dave")))
    assert res[0]["result"] == "blocked" and "hub answered 403" in res[0]["detail"]
    assert notices == [] and hub.server("dave") is not None
