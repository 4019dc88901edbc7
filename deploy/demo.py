"""Local demo (`xpuwatch demo`): the whole stack on 127.0.0.1, narrated on stdout, torn down on exit.

Starts, in a temporary working directory: the exporter on the simulated fleet running a fault scenario
(deploy/demo_scenario.yaml by default), Debian's Prometheus with the generated rules (demo durations, see
deploy/demo_config.py) scraping every second, Debian's Alertmanager with the generated routing tree, the
relay pointed at stand-in WeCom/Feishu bots that print every message (deploy/standin_bots.py), and the
remediation controller in dry-run against a stand-in Kubernetes API (deploy/standin_kube.py). Alerts
(pending, firing, inhibited, resolved), chat messages and remediation decisions (the controller's audit
log) are printed as they happen, each line stamped with wall time and seconds since start.

On Ctrl-C, SIGTERM, SIGHUP (the terminal closed) or ``--duration`` seconds after the stack is ready, every
child gets SIGTERM (its process group; SIGKILL after 10 s), the in-process servers stop and the working
directory is removed. Exit codes: 0 after a requested stop, 1 when a component failed to start or died, 2 for a
bad scenario or a missing need (Python extra, Debian binary; all checked before anything starts, each named with
the command that installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from xpuwatch.alerts.spec import DEFAULT_SPEC_PATH, Spec, SpecError, load_spec
from xpuwatch.deploy import demo_config as cfg
from xpuwatch.deploy.narration import AlertWatch, Console, readable, tail_audit, watch_alerts
from xpuwatch.deploy.standin_bots import BotMessage, ChatBots
from xpuwatch.deploy.standin_kube import KubeStandIn, scenario_objects
from xpuwatch.exporter import validation
from xpuwatch.remediation.notice import NOTICE_ALERTNAME
from xpuwatch.vendors.sim import Scenario, ScenarioError, parse_scenario

SCENARIO_RESOURCE = "demo_scenario.yaml"
PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the folder holding exporter/, deploy/, ...
READY_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Each stops the demo cleanly. SIGHUP too: its default (exit at once) left the five children running with
PPID 1 on their ports and the credentials in the working directory when the terminal closed."""

# binary -> (candidate names on PATH, Debian package that provides it)
BINARIES: Mapping[str, tuple[tuple[str, ...], str]] = {
    "prometheus": (("prometheus",), "prometheus"),
    "alertmanager": (("prometheus-alertmanager", "alertmanager"), "prometheus-alertmanager"),
}


# Python module -> (the extra that installs it, the part of the stack that imports it). Checked before anything
# starts: the remediation child imported kubernetes_asyncio only after the rest was up (9.7 s in).
MODULES: Mapping[str, tuple[str, str]] = {
    "kubernetes_asyncio": ("kubernetes", "the remediation controller"),
}


class DemoError(Exception):
    """The demo cannot start; ``code`` is the exit code (2: missing tool or bad input, 1: a failure)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Options:
    """Command-line choices. A port of 0 means "pick a free one"; ``duration`` None runs until stopped."""

    scenario: Path | None = None
    duration: float | None = None
    exporter_port: int = 0
    prometheus_port: int = 0
    alertmanager_port: int = 0
    relay_port: int = 0
    remediation_port: int = 0
    prometheus_bin: str | None = None
    alertmanager_bin: str | None = None
    spec: Path = DEFAULT_SPEC_PATH
    keep_workdir: bool = False
    until: tuple[str, ...] = ()  # regexes: stop once a printed line matched each (--duration bounds it)


def find_binary(kind: str, override: str | None) -> str:
    """Absolute path of the Prometheus or Alertmanager binary; DemoError(code 2) naming the package."""
    names, package = BINARIES[kind]
    if override:
        found = shutil.which(override)
        if found:
            return found
        raise DemoError(f"{kind} binary {override!r} not found or not executable", 2)
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise DemoError(
        f"{kind} not found (looked for {', '.join(names)} on PATH). "
        f"Install Debian's package: sudo apt-get install {package}",
        2,
    )


def preflight(opts: Options) -> tuple[str, str]:
    """Everything the demo needs, checked before anything starts: the Python modules of MODULES (same
    interpreter as the children) and the Prometheus and Alertmanager binaries. Returns the binaries' paths;
    DemoError(code 2) listing every missing need with the command that installs it."""
    missing: list[str] = []
    for module, (extra, user) in MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing or a broken install
            found = False
        if not found:
            missing.append(
                f"the Python module {module!r} ({user}): pip install '.[{extra}]' in the xpuwatch checkout "
                f"(or pip install 'xpuwatch[{extra}]'), into {sys.executable}"
            )
    binaries: list[str] = []
    packages: list[str] = []
    for kind, override in (("prometheus", opts.prometheus_bin), ("alertmanager", opts.alertmanager_bin)):
        try:
            binaries.append(find_binary(kind, override))
        except DemoError as exc:
            missing.append(str(exc))
            if not override:
                packages.append(BINARIES[kind][1])
    if packages:
        missing.append(f"all Debian packages at once: sudo apt-get install {' '.join(packages)}")
    if missing:
        raise DemoError("cannot start, nothing was started; missing:\n  - " + "\n  - ".join(missing), 2)
    return binaries[0], binaries[1]


def load_demo_scenario(path: Path | None) -> tuple[str, Scenario]:
    """The scenario text and its parse (the packaged one when ``path`` is None); DemoError(2) if bad."""
    try:
        if path is None:
            text = (
                importlib.resources.files("xpuwatch.deploy")
                .joinpath(SCENARIO_RESOURCE)
                .read_text(encoding="utf-8")
            )
        else:
            text = validation.config_text(path, "--scenario")
        scenario = parse_scenario(text)  # first: its errors name the key
        doc = yaml.safe_load(text) or {}
        if "timeline_start" not in doc:
            # The story runs from Prometheus's first scrape, however slowly the stack came up: a fault
            # before it would be a counter first seen at 1, which increase() never sees.
            text = yaml.safe_dump({**doc, "timeline_start": "first_scrape"})
            scenario = replace(scenario, timeline_start="first_scrape")
        return text, scenario
    except (OSError, UnicodeDecodeError) as exc:  # the packaged scenario
        raise DemoError(f"scenario {path}: {exc}", 2) from None
    except ScenarioError as exc:
        raise DemoError(f"scenario {path or SCENARIO_RESOURCE}: {exc}", 2) from None
    except ValueError as exc:  # --scenario unreadable, not a regular file or not UTF-8 (config_text)
        raise DemoError(str(exc), 2) from None


def requested_ports(opts: Options) -> dict[str, int]:
    """Each component's port from the options (0: pick a free one). DemoError(code 2), before anything
    starts, for a port out of range or two components asked for one port."""
    requested = {
        "exporter": opts.exporter_port,
        "prometheus": opts.prometheus_port,
        "alertmanager": opts.alertmanager_port,
        "relay": opts.relay_port,
        "remediation": opts.remediation_port,
    }
    taken: dict[int, str] = {}
    for name, port in requested.items():
        if not 0 <= port <= 65535:
            raise DemoError(f"--{name}-port: must be 1-65535 (0 or absent: a free one), got {port}", 2)
        if port:
            if port in taken:
                raise DemoError(f"--{taken[port]}-port and --{name}-port are both {port}", 2)
            taken[port] = name
    return requested


def free_ports(requested: dict[str, int]) -> dict[str, int]:
    """One distinct TCP port on 127.0.0.1 per name: the requested one (distinct, see ``requested_ports``),
    or the kernel's pick for port 0.

    Every pick's socket stays bound until all are chosen, so two components never get the same
    port (the kernel may hand a just-released port out again). A picked port was free a moment ago;
    the component binds it itself.
    """
    taken = {port: name for name, port in requested.items() if port}
    chosen: dict[str, int] = {}
    held: list[socket.socket] = []
    try:
        for name, port in requested.items():
            if port:
                chosen[name] = port
                continue
            while True:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(s)
                s.bind((cfg.LOOPBACK, 0))
                picked = int(s.getsockname()[1])
                if picked not in taken:
                    break
            taken[picked] = name
            chosen[name] = picked
    finally:
        for s in held:
            s.close()
    return chosen


# ---------------------------------------------------------------------------------------------- children


@dataclass
class Child:
    """A started component: its name, process (own process group), log file and readiness URL."""

    name: str
    proc: asyncio.subprocess.Process
    log: Path
    ready_url: str

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


async def start_child(comp: cfg.Component, files: cfg.Files, console: Console) -> Child:
    """Start one component in its own process group, output to logs/<name>.log."""
    log = files.logs / f"{comp.name}.log"
    path = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))
    with log.open("wb") as fh:
        proc = await asyncio.create_subprocess_exec(
            *comp.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=fh,
            stderr=asyncio.subprocess.STDOUT,
            cwd=files.root,
            env={**os.environ, "PYTHONPATH": path},
            process_group=0,  # Ctrl-C in the terminal reaches the demo only; it stops its children itself
        )
    console.line("demo", f"started {comp.name} (pid {proc.pid}), log {log.name}")
    return Child(comp.name, proc, log, comp.ready_url)


async def wait_ready(session: aiohttp.ClientSession, child: Child, stop: asyncio.Event) -> None:
    """Poll ``child.ready_url`` until 200; DemoError if the child exits or takes too long."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline and not stop.is_set():
        if child.proc.returncode is not None:
            raise DemoError(f"{child.name} exited with code {child.proc.returncode}:\n{child.log_tail()}")
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(child.ready_url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                if resp.status == 200:
                    return
        await asyncio.sleep(0.2)
    if not stop.is_set():
        raise DemoError(f"{child.name} not ready after {READY_TIMEOUT_SECONDS:.0f} s:\n{child.log_tail()}")


async def ready_all(session: aiohttp.ClientSession, children: Sequence[Child], stop: asyncio.Event) -> None:
    """Wait until every child is ready; the first failure cancels the other waits and is raised."""
    waits = [asyncio.create_task(wait_ready(session, c, stop)) for c in children]
    try:
        await asyncio.gather(*waits)
    finally:
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)


async def stop_children(children: Sequence[Child], console: Console) -> None:
    """SIGTERM every child's process group, SIGKILL what is left after STOP_TIMEOUT_SECONDS, reap all."""

    def signal_group(child: Child, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, sig)

    for child in children:
        if child.proc.returncode is None:
            signal_group(child, signal.SIGTERM)

    async def reap(child: Child) -> None:
        try:
            await asyncio.wait_for(child.proc.wait(), STOP_TIMEOUT_SECONDS)
        except TimeoutError:
            signal_group(child, signal.SIGKILL)
            await child.proc.wait()
            console.line(
                "demo", f"{child.name} (pid {child.proc.pid}) killed after {STOP_TIMEOUT_SECONDS:.0f} s"
            )
            return
        # Our own SIGTERM shows as -15; anything else is worth a look at the log.
        code = child.proc.returncode
        note = "" if code in (0, -signal.SIGTERM) else f" with code {code}; log tail:\n{child.log_tail()}"
        console.line("demo", f"stopped {child.name} (pid {child.proc.pid}){note}")

    await asyncio.gather(*(reap(c) for c in children))


async def serve_inprocess(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, cfg.LOOPBACK, 0)
    await site.start()
    return runner, int(runner.addresses[0][1])


# ---------------------------------------------------------------------------------------------- the stack


def write_files(
    files: cfg.Files,
    scenario_text: str,
    spec_path: Path,
    ports: cfg.Ports,
    kube_url: str,
    bots: ChatBots,
    bots_url: str,
) -> Spec:
    """Every config and secret file of the stack (secrets readable by the owner only); returns the spec
    the rules and routes were built from. DemoError(2) for a bad spec."""
    try:
        spec = cfg.demo_spec(load_spec(spec_path))
    except (SpecError, OSError) as exc:
        raise DemoError(validation.naming_once(exc, "--spec", f"alert spec {spec_path}"), 2) from None
    for d in (files.logs, files.prometheus_data, files.alertmanager_data, files.relay_token.parent):
        d.mkdir(parents=True, exist_ok=True)
    files.relay_token.parent.chmod(0o700)
    password = secrets.token_urlsafe(24)
    secret_files = {
        files.relay_token: secrets.token_urlsafe(32),
        files.remediation_token: secrets.token_urlsafe(32),
        files.relay_password: password,
        files.wecom_url: bots.wecom_url(bots_url),
        files.feishu_url: bots.feishu_url(bots_url),
    }
    for path, value in secret_files.items():
        path.write_text(value + "\n", encoding="utf-8")
        path.chmod(0o600)
    files.scenario.write_text(scenario_text, encoding="utf-8")
    files.rules.write_text(cfg.rules_text(spec), encoding="utf-8")
    files.alertmanager.write_text(cfg.alertmanager_text(spec, ports, files), encoding="utf-8")
    files.exporter_targets.write_text("[]\n", encoding="utf-8")

    def dump(path: Path, doc: dict[str, Any]) -> None:
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")

    dump(files.prometheus, cfg.prometheus_config(ports, files))
    dump(files.relay, cfg.relay_config(ports, files))
    dump(files.remediation, cfg.remediation_config(ports, files, kube_url, password))
    return spec


def publish_exporter(files: cfg.Files, ports: cfg.Ports) -> None:
    """Hand the exporter to Prometheus' file discovery (atomic rename: never a half-written file)."""
    tmp = files.exporter_targets.with_suffix(".tmp")
    tmp.write_text(json.dumps(cfg.exporter_targets(ports)), encoding="utf-8")
    tmp.replace(files.exporter_targets)


def print_banner(console: Console, ports: cfg.Ports, files: cfg.Files, duration: float | None) -> None:
    rows = [
        ("Prometheus", cfg.url(ports.prometheus, "/alerts")),
        ("Alertmanager", cfg.url(ports.alertmanager)),
        ("exporter", cfg.url(ports.exporter, "/metrics")),
        ("relay", cfg.url(ports.relay, "/metrics")),
        ("remediation", cfg.url(ports.remediation, "/metrics")),
        ("working dir", str(files.root)),
    ]
    width = max(len(r[0]) for r in rows)
    stop = f"stops in {duration:g} s" if duration else "Ctrl-C stops everything"
    console.line(
        "demo",
        f"stack ready after {console.elapsed():.1f} s ({stop})\n"
        + "\n".join(f"{name:<{width}}  {where}" for name, where in rows),
    )


async def run(opts: Options, console: Console | None = None) -> int:
    """The demo, start to cleanup. Returns the exit code (see module docstring)."""
    console = console or Console()
    try:
        prometheus, alertmanager = preflight(opts)
        scenario_text, scenario = load_demo_scenario(opts.scenario)
        wanted = requested_ports(opts)
    except DemoError as exc:
        print(f"xpuwatch demo: {exc}", file=sys.stderr, flush=True)
        return exc.code

    stop = asyncio.Event()
    reason: list[str] = []

    def request_stop(why: str) -> None:
        if not stop.is_set():
            reason.append(why)
            stop.set()

    awaited = [re.compile(p, re.S) for p in opts.until]

    def seen(line: str) -> None:
        """Strike each --until pattern the line matches; stop once none is left."""
        if awaited:
            awaited[:] = [p for p in awaited if not p.search(line)]
            if not awaited:
                request_stop("every --until pattern seen")

    console.on_line = seen

    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, request_stop, signal.Signals(sig).name)

    root = Path(tempfile.mkdtemp(prefix="xpuwatch-demo-"))
    files = cfg.Files.under(root)
    console.line("demo", f"working directory {root}")
    runners: list[web.AppRunner] = []
    children: list[Child] = []
    tasks: list[asyncio.Task[Any]] = []
    code = 0

    def on_message(msg: BotMessage) -> None:
        console.line("WeCom" if msg.platform == "wecom" else "Feishu", readable(msg))
        # The controller's dry-run notices reach WeCom too (a drain's notice follows its alert's category),
        # sometimes before the alert's own message: the headline figure is the alert's.
        if (
            msg.platform == "wecom"
            and console.first_hardware_message is None
            and NOTICE_ALERTNAME not in msg.text
        ):
            console.first_hardware_message = console.elapsed()

    bots = ChatBots(secrets.token_hex(16), secrets.token_hex(16), on_message)
    kube = KubeStandIn(scenario_objects(scenario))
    try:
        async with aiohttp.ClientSession() as session:
            runner, bots_port = await serve_inprocess(bots.app())
            runners.append(runner)
            runner, kube_port = await serve_inprocess(kube.app())
            runners.append(runner)
            ports = cfg.Ports(**free_ports(wanted))
            spec = write_files(
                files, scenario_text, opts.spec, ports, cfg.url(kube_port), bots, cfg.url(bots_port)
            )
            console.line(
                "demo",
                f"stand-in WeCom and Feishu bots on {cfg.url(bots_port)}; stand-in Kubernetes API on "
                f"{cfg.url(kube_port)} (node {scenario.node}, {len(kube.objects) - 1} pods)",
            )
            for comp in cfg.components(prometheus, alertmanager, sys.executable, ports, files):
                children.append(await start_child(comp, files, console))
            await ready_all(session, children, stop)
            if not stop.is_set():
                publish_exporter(files, ports)
                print_banner(console, ports, files, opts.duration)
                if opts.duration is not None:
                    loop.call_later(opts.duration, request_stop, f"--duration {opts.duration:g} s reached")
                watch = AlertWatch({a.name: a.for_ for a in spec.alerts})
                tasks = [
                    asyncio.create_task(
                        watch_alerts(
                            session, cfg.url(ports.prometheus), cfg.url(ports.alertmanager), watch, console
                        )
                    ),
                    asyncio.create_task(tail_audit(files.audit, console)),
                ]
                waits = [
                    asyncio.create_task(stop.wait()),
                    *(asyncio.create_task(c.proc.wait()) for c in children),
                ]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for w in waits:
                    w.cancel()
                for c in children:
                    if c.proc.returncode is not None and not stop.is_set():
                        console.line(
                            "demo", f"{c.name} exited with code {c.proc.returncode}:\n{c.log_tail()}"
                        )
                        code = 1
                        request_stop(f"{c.name} died")
            console.line("demo", f"stopping ({reason[0] if reason else 'done'})")
    except DemoError as exc:
        console.line("demo", f"error: {exc}")
        code = exc.code
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await stop_children(children, console)
        for runner in runners:
            await runner.cleanup()
        console.line("demo", "summary: " + summary(console))
        if opts.keep_workdir:
            console.line("demo", f"kept working directory {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
            console.line("demo", f"removed working directory {root}")
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
    return code


def summary(console: Console) -> str:
    """Message counts and the headline figures: seconds from start to the first hardware alert (as
    Prometheus saw it) and to the first hardware message (an alert's WeCom message, not a controller notice)."""
    n = {k: console.counts.get(k, 0) for k in ("WeCom", "Feishu", "remediation")}
    text = f"{n['WeCom']} WeCom and {n['Feishu']} Feishu messages, {n['remediation']} remediation lines"
    first_alert, first_msg = console.first_hardware_alert, console.first_hardware_message
    if first_alert is not None:
        text += f"; first hardware alert active at +{first_alert:.1f} s"
    if first_msg is not None:
        text += f"; first hardware message at +{first_msg:.1f} s"
        if first_alert is not None:
            text += f" ({first_msg - first_alert:.1f} s after the alert)"
    return text


def main(opts: Options) -> int:
    """Run the demo in a fresh event loop (the CLI entry)."""
    return asyncio.run(run(opts))
