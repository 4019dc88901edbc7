"""E2E benchmark: time from a hardware fault to the chat message, split into the stages of the real stack.

The stack is the one tests/e2e/test_stack.py runs: the simulated exporter (the real ``xpuwatch serve
--simulate`` in a subprocess) with an uncorrectable ECC error injected on nvidia/0 at a known time, Debian's
Prometheus evaluating the generated rules, Debian's Alertmanager with the generated config, the relay and the
WeCom stand-in (both in this process). Each run starts a fresh stack; every timestamp is Unix time on this
machine (all processes share its clock):

    fault      the simulator's start (printed by a launcher around the real CLI) + the fault's ``at``
    exporter   xpuwatch_backend_last_success_timestamp_seconds of the first /metrics that shows the error
               (this script reads /metrics every 50 ms; the exporter stamps the end of its poll)
    scrape     timestamp of Prometheus' first stored sample with the error (the scrape's start)
    firing     timestamp of the first ALERTS{alertstate="firing"} sample (the evaluation that fired)
    AM         Alertmanager's ``updatedAt`` of the alert when first seen (its arrival; read every 100 ms)
    relay      the relay's ``received_at`` of the notification in its outbox (the webhook's arrival)
    bot        the stand-in bot counting the message it accepted

Which part is configuration: fault -> exporter waits for the next poll (up to the poll interval);
exporter -> scrape waits for the next scrape (up to the scrape interval); scrape -> firing waits for the
next rule evaluation (up to the evaluation interval; ``increase()`` needs the sample, ``for`` adds its
duration); firing -> AM is Prometheus' notifier; AM -> relay is ``group_wait`` of the hardware route plus
Alertmanager's own work; relay -> bot is xpuwatch's relay (render, sign, send, within the bot's limits).

Profiles (``--profile``): ``demo`` polls, scrapes and evaluates every second with a 1 s group_wait (the
``xpuwatch demo`` timings, deploy/demo_config.py); ``production`` polls every 5 s (a vendor backend's default
interval, vendors/registry.py), scrapes every 15 s (deploy/kustomize/base/monitoring.yaml), evaluates every
15 s (assumed equal to the scrape interval; Prometheus' own default is 1 m) and uses the spec's 10 s
group_wait (alerts/spec.yaml). Each setting can be overridden.

    PYTHONPATH=$PWD python benchmarks/fault_latency.py [--profile demo|production] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import random
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.ports import free_port
from tests.relay.fakebots import FakeFeishu, FakeWeCom
from tests.relay.harness import TOKEN, settings_for, start_relay
from xpuwatch.alerts.alertmanager import Endpoints, render_alertmanager
from xpuwatch.alerts.relay.config import RateLimit
from xpuwatch.alerts.rules import render_rules
from xpuwatch.alerts.spec import load_spec
from xpuwatch.vendors.sim import default_scenario_text

ROOT = Path(__file__).resolve().parents[1]
ALERT = "AcceleratorEccUncorrectable"
PROFILES: dict[str, dict[str, float]] = {
    "demo": {"poll": 1.0, "scrape": 1.0, "evaluation": 1.0, "group_wait": 1.0},
    "production": {"poll": 5.0, "scrape": 15.0, "evaluation": 15.0, "group_wait": 10.0},
}
STAGES = ("exporter", "scrape", "firing", "AM", "relay", "bot")
# Runs the real CLI; only prints the simulator's start (Unix time) so that the fault's instant is known.
LAUNCHER = """\
import runpy, sys
import xpuwatch.vendors.sim as sim
init = sim.SimBackend.__init__
def traced(self, *args, **kwargs):
    init(self, *args, **kwargs)
    print(f"SIM_START {self.start!r}", flush=True)
sim.SimBackend.__init__ = traced
sys.argv = ["xpuwatch", *sys.argv[1:]]
runpy.run_module("xpuwatch.entry", run_name="__main__")
"""


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def rfc3339(text: str) -> float:
    """Alertmanager's timestamps carry up to 9 fractional digits; Python reads 6."""
    text = re.sub(r"(\.\d{6})\d+", r"\1", text.replace("Z", "+00:00"))
    return datetime.fromisoformat(text).timestamp()


def first_sample(prom: str, selector: str, at: float) -> float | None:
    """Timestamp of the first raw sample > 0 of ``selector`` in the 10 minutes before ``at``."""
    q = urllib.parse.urlencode({"query": f"{selector}[10m]", "time": f"{at:.3f}"})
    res = get_json(f"{prom}/api/v1/query?{q}")["data"]["result"]
    times = [float(ts) for series in res for ts, v in series["values"] if float(v) > 0]
    return min(times) if times else None


@dataclasses.dataclass(frozen=True)
class Config:
    poll: float
    scrape: float
    evaluation: float
    group_wait: float
    fault_at: float  # seconds after the simulator starts


async def one_run(cfg: Config, tmp: Path) -> dict[str, float]:
    wecom = FakeWeCom(limits=(RateLimit(20, 60.0),), clock=time.time)  # window times = acceptance, Unix
    feishu = FakeFeishu()
    await wecom.start()
    await feishu.start()
    relay = await start_relay(
        settings_for(
            tmp,
            {
                "oncall-wecom": {"type": "wecom", "url": wecom.url()},
                "team-feishu": {"type": "feishu", "url": feishu.url()},
            },
        )
    )
    spec = load_spec()
    spec = dataclasses.replace(
        spec,
        routing=dataclasses.replace(
            spec.routing,
            hardware=dataclasses.replace(spec.routing.hardware, group_wait=f"{cfg.group_wait:g}s"),
        ),
    )
    (tmp / "token").write_text(TOKEN)
    exporter_port, prom_port, am_port = free_port(), free_port(), free_port()
    (tmp / "rules.yml").write_text(render_rules(spec))
    (tmp / "alertmanager.yml").write_text(
        render_alertmanager(
            spec,
            Endpoints(
                relay_url=relay.url,
                remediator_url=f"http://127.0.0.1:{free_port()}",  # no controller here
                relay_credentials_file=str(tmp / "token"),
                remediator_credentials_file=str(tmp / "token"),
            ),
        )
    )
    (tmp / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {
                    "scrape_interval": f"{cfg.scrape:g}s",
                    "evaluation_interval": f"{cfg.evaluation:g}s",
                },
                "rule_files": [str(tmp / "rules.yml")],
                "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
                "scrape_configs": [
                    {"job_name": "xpuwatch", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}
                ],
            }
        )
    )
    scenario = yaml.safe_load(default_scenario_text())
    scenario["timeline"] = [
        *scenario["timeline"],
        {"at": cfg.fault_at, "device": "nvidia/0", "fault": "ecc_uncorrectable"},
    ]
    (tmp / "sim.yaml").write_text(yaml.safe_dump(scenario))
    (tmp / "exporter.yml").write_text(yaml.safe_dump({"backends": {"sim": {"interval": cfg.poll}}}))
    am_bin = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
    prom_bin = shutil.which("prometheus") or "/usr/bin/prometheus"
    procs: list[asyncio.subprocess.Process] = []
    quiet = asyncio.subprocess.DEVNULL
    try:
        procs.append(
            await asyncio.create_subprocess_exec(
                am_bin, f"--config.file={tmp / 'alertmanager.yml'}", f"--storage.path={tmp / 'am'}",
                f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address=",
                stdout=quiet, stderr=quiet,
            )
        )  # fmt: skip
        procs.append(
            await asyncio.create_subprocess_exec(
                prom_bin, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}", stdout=quiet, stderr=quiet,
            )
        )  # fmt: skip
        exporter = await asyncio.create_subprocess_exec(
            sys.executable, "-c", LAUNCHER, "serve", "--simulate", f"--sim-config={tmp / 'sim.yaml'}",
            f"--config={tmp / 'exporter.yml'}", f"--web.listen-address=127.0.0.1:{exporter_port}",
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=asyncio.subprocess.PIPE, stderr=quiet,
        )  # fmt: skip
        procs.append(exporter)
        assert exporter.stdout is not None
        async with asyncio.timeout(60):
            line = (await exporter.stdout.readline()).decode()
        if not line.startswith("SIM_START "):
            raise SystemExit(f"exporter launcher printed {line!r}")
        fault = float(line.split()[1]) + cfg.fault_at
        times = await watch(cfg, fault, exporter_port, am_port, relay, wecom)
        prom = f"http://127.0.0.1:{prom_port}"
        end = time.time() + 1
        scrape = first_sample(prom, 'accelerator_ecc_errors_total{type="uncorrected"}', end)
        firing = first_sample(prom, f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}', end)
        times.update(scrape=scrape or float("nan"), firing=firing or float("nan"))
        return {"fault": fault, **times}
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
        for p in procs:
            try:
                async with asyncio.timeout(10):
                    await p.wait()
            except TimeoutError:
                p.kill()
        await relay.close()
        await wecom.stop()
        await feishu.stop()


async def watch(
    cfg: Config, fault: float, exporter_port: int, am_port: int, relay: Any, wecom: FakeWeCom
) -> dict[str, float]:
    """Follow the fault through the exporter and Alertmanager until the bot has the message."""
    out: dict[str, float] = {}
    metrics = f"http://127.0.0.1:{exporter_port}/metrics"
    am = f"http://127.0.0.1:{am_port}/api/v2/alerts?" + urllib.parse.urlencode(
        {"filter": f'alertname="{ALERT}"'}
    )
    uncorrected = re.compile(
        r'^accelerator_ecc_errors_total\{[^}]*type="uncorrected"[^}]*\} ([0-9.e+]+)$', re.M
    )
    polled = re.compile(
        r'^xpuwatch_backend_last_success_timestamp_seconds\{backend="sim"\} ([0-9.e+]+)$', re.M
    )
    deadline = fault + 6 * (cfg.poll + cfg.scrape + cfg.evaluation + cfg.group_wait) + 60
    next_am = 0.0
    while "bot" not in out:
        if time.time() > deadline:
            raise SystemExit(f"no message {deadline - fault:.0f} s after the fault; stages so far: {out}")
        if "exporter" not in out and time.time() > fault - 1:
            with contextlib.suppress(OSError):
                text = await asyncio.to_thread(
                    lambda: urllib.request.urlopen(metrics, timeout=5).read().decode()
                )
                if any(float(v) > 0 for v in uncorrected.findall(text)):
                    m = polled.search(text)
                    out["exporter"] = float(m.group(1)) if m else time.time()
        if "AM" not in out and time.time() >= next_am:
            next_am = time.time() + 0.1
            with contextlib.suppress(OSError):
                alerts = await asyncio.to_thread(get_json, am)
                if alerts:
                    out["AM"] = min(rfc3339(a["updatedAt"]) for a in alerts)
        for body, at in zip(wecom.accepted, wecom.window.times, strict=False):
            if ALERT in json.dumps(body, ensure_ascii=False):
                out["bot"] = at
                break
        await asyncio.sleep(0.05)
    db = sqlite3.connect(f"file:{relay.relay.outbox.path}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT received_at, payload FROM notifications WHERE channel = 'oncall-wecom' ORDER BY id"
        ).fetchall()
    finally:
        db.close()
    out["relay"] = next(float(at) for at, payload in rows if ALERT in str(payload))
    return out


def stages(run: dict[str, float]) -> dict[str, float]:
    """Seconds per stage (each from the previous one) and in total."""
    out, prev = {}, run["fault"]
    for name in STAGES:
        out[name] = run[name] - prev
        prev = run[name]
    out["total"] = run["bot"] - run["fault"]
    return out


async def main(args: argparse.Namespace) -> None:
    base = PROFILES[args.profile]
    cfg = Config(
        poll=args.poll or base["poll"],
        scrape=args.scrape or base["scrape"],
        evaluation=args.evaluation or base["evaluation"],
        group_wait=args.group_wait if args.group_wait is not None else base["group_wait"],
        fault_at=args.fault_at or max(8.0, 2.5 * (args.scrape or base["scrape"])),
    )
    rule = load_spec().alert(ALERT)
    print(
        f"== fault -> chat message, profile {args.profile}: exporter poll {cfg.poll:g} s, scrape {cfg.scrape:g} s, "
        f"rule evaluation {cfg.evaluation:g} s, {ALERT} for {rule.for_} (increase(...[{rule.value('window')}]) > "
        f"0), hardware route group_wait {cfg.group_wait:g} s; fault "
        f"injected {cfg.fault_at:g} s + U(0, poll) after the simulator starts"
    )
    print("   stage (from the previous one): what bounds it")
    print(
        f"   exporter: next poll (<= {cfg.poll:g} s) | scrape: next scrape (<= {cfg.scrape:g} s) | firing: next "
        f"evaluation (<= {cfg.evaluation:g} s) + for | AM: Prometheus notifier | relay: group_wait "
        f"{cfg.group_wait:g} s + Alertmanager | bot: xpuwatch relay"
    )
    results = []
    draw = random.Random(args.seed)
    for i in range(args.runs):
        # A fault strikes at any moment of the poll cycle, not on a poll: offset it by a random fraction.
        run_cfg = dataclasses.replace(cfg, fault_at=round(cfg.fault_at + draw.uniform(0, cfg.poll), 3))
        with tempfile.TemporaryDirectory(prefix="xpuwatch-latency-") as tmp:
            run = stages(await one_run(run_cfg, Path(tmp)))
        results.append(run)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in run.items()) + " s", flush=True)
    if len(results) > 1:
        print(
            "median: "
            + ", ".join(f"{k} {statistics.median(r[k] for r in results):.3f}" for k in results[0])
            + " s"
        )
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="demo")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--poll", type=float, help="exporter poll interval, seconds")
    parser.add_argument("--scrape", type=float, help="Prometheus scrape interval, seconds")
    parser.add_argument("--evaluation", type=float, help="Prometheus rule evaluation interval, seconds")
    parser.add_argument("--group-wait", type=float, help="group_wait of the hardware route, seconds")
    parser.add_argument(
        "--fault-at",
        type=float,
        help="seconds after the simulator starts (default 2.5 scrapes) + a random part",
    )
    parser.add_argument("--seed", type=int, default=13, help="seed of the random part of each fault's time")
    logging.basicConfig(level=logging.CRITICAL)
    asyncio.run(main(parser.parse_args()))
