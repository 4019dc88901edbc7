"""Issue 37's break-it reproductions, rerun against the real services (each its own process, on loopback):

1. ``bombs``: 8 senders post, without credentials and in a loop, a 1 MiB gzip of 1 GiB of zeros
   (``Content-Encoding: gzip``) to one service at a time, while this process times 20 scrapes of the
   exporter's /metrics, 20 relay webhooks and 20 remediation webhooks (each answer waited for at most 10 s).
2. ``unread``: 600 clients ask the exporter (512 simulated A100s: a 4.9 MB plain body) for /metrics and never
   read the answer, reconnecting whenever the server closes one; 80 /healthz probes, one every 0.5 s, each
   waited for at most 2 s.
3. ``slowbody``: 600 authenticated webhooks whose bodies never finish arriving hold relay connections
   while 80 webhooks, one every 0.25 s, are each waited for at most 2 s.
4. ``report`` (only when asked): ``xpuwatch report --timeout 5 --max-answer-mib 1024`` against a
   Prometheus stand-in answering every query with a 200 MB vector: the wall time (the deadline now covers
   decoding).
5. ``recheck``: the remediation controller (``--apply``, the fake API server of tests/remediation/fakekube.py)
   gets a drain alert whose re-check asks a Prometheus stand-in that answers 300 MB (streamed, no
   Content-Length) or ``[null]``; /healthz is probed every 0.1 s meanwhile. Printed: the webhook's answer
   time, the slowest probe, the controller's peak RSS (VmHWM), whether the node was tainted, and the
   re-check's counters.

``--baseline DIR`` runs the same services from another source tree first (``git archive COMMIT | tar -x -C
DIR``), so before and after come from one run on one machine. Figures depend on the machine's load: print
``uptime`` with them.

    PYTHONPATH=$PWD python benchmarks/hostile_clients.py [--baseline /tmp/base] [--only bombs,unread,slowbody,recheck]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.ports import free_port
from tests.remediation.fakekube import FakeKube

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token"
A100S = (
    'seed: 1\npoll_interval: 5\ndevices:\n  - {vendor: nvidia, model: "NVIDIA A100-SXM4-80GB", count: 512}\n'
)


# ------------------------------------------------------------------------------------------ processes
class Service:
    """``xpuwatch <args>`` from ``tree`` in a child process, listening on ``port``."""

    def __init__(self, tree: Path, args: list[str], port: int, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("XPUWATCH_")}
        env["PYTHONPATH"] = str(tree)
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "xpuwatch", *args],
                cwd=tree,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.port, self.log = port, log
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"xpuwatch {args[0]} did not start: {log.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            time.sleep(0.1)

    def peak_rss_mib(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Background:
    """An asyncio loop in a thread, for the fake API server and the Prometheus stand-in."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def serve(self, app: web.Application) -> tuple[web.AppRunner, int]:
        """``app`` on a free loopback port, on this loop: (its runner, to clean up; the port)."""
        runner = web.AppRunner(app)
        self.run(runner.setup())
        port = free_port()
        self.run(web.TCPSite(runner, "127.0.0.1", port).start())
        return runner, port


# ------------------------------------------------------------------------------------------ clients
def timed(
    url: str, body: bytes | None = None, headers: dict[str, str] | None = None, timeout: float = 10
) -> float:
    """Seconds until ``url`` answered (any status); ``inf`` when it did not within ``timeout``."""
    req = urllib.request.Request(url, data=body, headers=headers or {})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
    except urllib.error.HTTPError as exc:
        exc.read()
    except OSError:
        return float("inf")
    return time.perf_counter() - t0


def summary(times: list[float]) -> str:
    done = sorted(t for t in times if t != float("inf"))
    if not done:
        return f"0 of {len(times)} answered"
    p50 = statistics.median(times) if len(done) * 2 > len(times) else float("inf")
    text = f"p50 {p50 * 1000:.0f} ms" if p50 != float("inf") else "p50 -"
    return f"{text}, max {done[-1] * 1000:.0f} ms, {len(done)} of {len(times)} answered"


def gzip_bomb(mib: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(2**20)
    return b"".join([*(c.compress(zeros) for _ in range(mib)), c.flush()])


class Bombers:
    """``n`` threads posting ``bomb`` gzip-encoded to ``path`` of 127.0.0.1:``port`` in a loop."""

    def __init__(self, port: int, path: str, bomb: bytes, n: int = 8) -> None:
        self.head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n"
        ).encode()
        self.port, self.bomb, self.sent = port, bomb, 0
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        while not self.done.is_set():
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=30) as s,
            ):
                s.sendall(self.head + self.bomb)
                self.sent += 1
                s.recv(4096)

    def stop(self) -> None:
        self.done.set()
        for t in self.threads:
            t.join(60)


class NeverReading:
    """``n`` connections that each ask for ``path`` and never read the answer; with ``reconnect``, a
    connection the server closes is replaced at once (poll on POLLRDHUP, which reports the close without
    reading)."""

    def __init__(self, port: int, path: str, n: int, reconnect: bool) -> None:
        self.port, self.request = port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        self.reconnect = reconnect
        self.poll = select.poll()
        self.socks: dict[int, socket.socket] = {}
        self.replaced = 0
        for _ in range(n):
            self._open()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.connect(("127.0.0.1", self.port))
            s.sendall(self.request)
        except OSError:
            s.close()
            return
        self.socks[s.fileno()] = s
        self.poll.register(s, select.POLLRDHUP | select.POLLHUP | select.POLLERR)

    def _run(self) -> None:
        while not self.done.is_set():
            for fd, _ in self.poll.poll(200):
                s = self.socks.pop(fd, None)
                if s is not None:
                    self.poll.unregister(fd)
                    s.close()
                    if self.reconnect:
                        self.replaced += 1
                        self._open()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)
        for s in self.socks.values():
            s.close()
        self.socks.clear()


def metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        return r.read().decode()


def sample(text: str, name: str, **labels: str) -> str:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    found = re.search(rf"^{re.escape(name)}\{{{want}\}} (\S+)$", text, re.M)
    return found.group(1) if found else "absent"


# ------------------------------------------------------------------------------------------ services
def relay_config(tmp: Path, port: int) -> list[str]:
    (tmp / "token").write_text(TOKEN)
    (tmp / "relay.yaml").write_text(
        json.dumps(
            {
                "listen_address": f"127.0.0.1:{port}",
                "outbox": str(tmp / "outbox.sqlite"),
                "auth": {"bearer_token_file": "token"},
                "channels": {"oncall": {"type": "wecom", "webhook_url_file": "wecom"}},
            }
        )
    )
    (tmp / "wecom").write_text("http://127.0.0.1:9/cgi-bin/webhook/send?key=x")
    return ["relay", "--config", str(tmp / "relay.yaml")]


def remediation_config(tmp: Path, kube: str, port: int, prometheus: str | None = None) -> list[str]:
    (tmp / "token").write_text(TOKEN)
    recheck = f"recheck: {{prometheus_url: '{prometheus}', timeout_seconds: 3}}\n" if prometheus else ""
    (tmp / "remediate.yaml").write_text(
        "rules: [{action: drain}]\n"
        f"webhook: {{listen_host: 127.0.0.1, listen_port: {port}, bearer_token_file: token}}\n"
        "guard: {max_disrupted_ratio: 1.0, max_disrupted_nodes: 5}\n"
        "drain: {default_mode: immediate}\n"
        f"kube: {{host: '{kube}'}}\n"
        "leader: {identity: bench-0, lease_namespace: xpuwatch, retry_period_seconds: 0.2}\n"
        f"audit_path: {tmp / 'audit.jsonl'}\ntick_seconds: 0.5\n{recheck}"
    )
    return ["remediate", "--config", str(tmp / "remediate.yaml"), "--apply"]


def drain_alert(node: str) -> bytes:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
    labels = {
        "alertname": "AcceleratorEccUncorrectable",
        "category": "hardware",
        "severity": "critical",
        "action": "drain",
        "node": node,
        "vendor": "nvidia",
        "device": "0",
        "uuid": f"GPU-{node}",
    }
    alert = {"status": "firing", "labels": labels, "startsAt": now, "endsAt": "0001-01-01T00:00:00Z"}
    return json.dumps({"version": "4", "groupKey": "{}:{}", "alerts": [alert]}).encode()


def webhook_body() -> bytes:
    alert = {"status": "firing", "labels": {"alertname": "Bench"}, "startsAt": "2026-01-01T00:00:00Z"}
    return json.dumps({"version": "4", "groupKey": "{}:{}", "alerts": [alert]}).encode()


@contextlib.contextmanager
def remediation(
    tree: Path, tmp: Path, bg: Background, prometheus: str | None = None
) -> Iterator[tuple[Service, FakeKube]]:
    fake = FakeKube()
    url = bg.run(fake.start())
    fake.add_node("gpu-0")
    port = free_port()
    svc = Service(tree, remediation_config(tmp, url, port, prometheus), port, tmp / "remediate.log")
    try:
        deadline = time.monotonic() + 60  # until it holds the Lease (503 "not the leader" before)
        while time.monotonic() < deadline:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/alertmanager/remediate",
                data=json.dumps({"version": "4", "groupKey": "{}:{}", "alerts": []}).encode(),
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            with contextlib.suppress(urllib.error.HTTPError), urllib.request.urlopen(req, timeout=10):
                break
            time.sleep(0.2)
        yield svc, fake
    finally:
        svc.stop()
        bg.run(fake.stop())


# ------------------------------------------------------------------------------------------ runs
def bombs(tree: Path, tmp: Path, bg: Background, bomb: bytes) -> None:
    exp_port, relay_port = free_port(), free_port()
    exporter = Service(
        tree,
        ["serve", "--simulate", "--web.listen-address", f"127.0.0.1:{exp_port}"],
        exp_port,
        tmp / "exp.log",
    )
    relay = Service(tree, relay_config(tmp, relay_port), relay_port, tmp / "relay.log")
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    try:
        with remediation(tree, tmp, bg) as (ctl, _):
            targets: list[tuple[str, int, str, Callable[[], float]]] = [
                (
                    "exporter scrape",
                    exp_port,
                    "/metrics",
                    lambda: timed(f"http://127.0.0.1:{exp_port}/metrics"),
                ),
                (
                    "relay webhook",
                    relay_port,
                    "/alertmanager/oncall",
                    lambda: timed(f"http://127.0.0.1:{relay_port}/alertmanager/oncall", webhook_body(), auth),
                ),
                (
                    "remediation webhook",
                    ctl.port,
                    "/alertmanager/remediate",
                    lambda: timed(
                        f"http://127.0.0.1:{ctl.port}/alertmanager/remediate",
                        json.dumps({"version": "4", "groupKey": "{}:{}", "alerts": []}).encode(),
                        auth,
                    ),
                ),
            ]
            for name, port, path, ask in targets:
                quiet = [ask() for _ in range(5)]
                senders = Bombers(port, path, bomb)
                time.sleep(2)
                times = []
                for _ in range(20):
                    times.append(ask())
                    time.sleep(0.1)
                senders.stop()
                print(
                    f"  {name}: quiet {summary(quiet)}; during 8 gzip-bomb senders {summary(times)}"
                    f" ({senders.sent} bombs sent)"
                )
    finally:
        exporter.stop()
        relay.stop()


def unread(tree: Path, tmp: Path) -> None:
    (tmp / "a100.yaml").write_text(A100S)
    port = free_port()
    exporter = Service(
        tree,
        [
            "serve",
            "--simulate",
            "--sim-config",
            str(tmp / "a100.yaml"),
            "--web.listen-address",
            f"127.0.0.1:{port}",
        ],
        port,
        tmp / "exp.log",
    )
    try:
        time.sleep(3)  # a poll has landed
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
            size = len(r.read())
        print(f"  /metrics body {size / 1e6:.1f} MB")
        for reconnect in (False, True):
            clients = NeverReading(port, "/metrics", 600, reconnect)
            start = time.monotonic()
            time.sleep(5)
            probes = []
            for _ in range(80):
                probes.append(timed(f"http://127.0.0.1:{port}/healthz", timeout=2))
                time.sleep(0.5)
            if not reconnect:  # held past the 60 s write deadline
                time.sleep(max(0.0, 70 - (time.monotonic() - start)))
            try:
                text = metrics_text(port)
            except OSError:  # every slot held (the baseline): read once they are gone
                clients.stop()
                time.sleep(1)
                text = metrics_text(port)
            clients.stop()
            closed = {
                r: sample(text, "xpuwatch_http_connections_closed_total", reason=r)
                for r in ("evicted", "write_timeout", "full")
            }
            print(
                f"  /healthz during 600 clients that never read"
                f"{', reconnecting when closed' if reconnect else ''}: {summary(probes)}; reconnections:"
                f" {clients.replaced}; closed by the guard (since start): {closed}"
            )
    finally:
        exporter.stop()


def slowbody(tree: Path, tmp: Path) -> None:
    port = free_port()
    relay = Service(tree, relay_config(tmp, port), port, tmp / "relay.log")
    head = (
        f"POST /alertmanager/oncall HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    ).encode()
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    socks = []
    try:
        for _ in range(600):
            with contextlib.suppress(OSError):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.sendall(head)
                socks.append(s)
        time.sleep(2)
        times = []
        for _ in range(80):
            times.append(
                timed(f"http://127.0.0.1:{port}/alertmanager/oncall", webhook_body(), auth, timeout=2)
            )
            time.sleep(0.25)
        for s in socks:  # first: on a guard that cannot evict them, they hold every slot
            s.close()
        time.sleep(1)
        text = metrics_text(port)
        closed = {
            r: sample(text, "xpuwatch_http_connections_closed_total", reason=r) for r in ("evicted", "full")
        }
        print(
            f"  relay webhooks during 600 authenticated bodies sent slowly: {summary(times)}; closed: {closed}"
        )
    finally:
        for s in socks:
            s.close()
        relay.stop()


def report(tree: Path, tmp: Path, bg: Background) -> None:
    """``xpuwatch report --timeout 5 --max-answer-mib 1024`` against a Prometheus stand-in answering every
    query at once with a 200 MB vector (~2.2 million series): the wall time and the one line it prints."""
    item = b'{"metric":{"node":"n1","uuid":"GPU-00000000"},"value":[1700000000,"1"]},'
    n = 200 * 2**20 // len(item)
    body = (
        b'{"status":"success","data":{"resultType":"vector","result":[' + item * (n - 1) + item[:-1] + b"]}}"
    )

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/api/v1/{kind}", answer)
    runner, port = bg.serve(app)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPUWATCH_")}
    env["PYTHONPATH"] = str(tree)
    argv = [sys.executable, "-m", "xpuwatch", "report", "--prometheus", f"http://127.0.0.1:{port}"]
    argv += ["--timeout", "5", "--max-answer-mib", "1024", "--concurrency", "1", "-o", str(tmp / "r.html")]
    try:
        t0 = time.perf_counter()
        try:
            run = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            print(
                f"  report --timeout 5 against {len(body) / 1e6:.0f} MB answers: running after 180 s, killed"
            )
            return
        took = time.perf_counter() - t0
        last = (run.stderr.strip().splitlines() or [""])[-1]
        print(
            f"  report --timeout 5 against {len(body) / 1e6:.0f} MB answers: {took:.1f} s, exit {run.returncode}:"
            f" {last[:160]}"
        )
    finally:
        bg.run(runner.cleanup())


async def _garbage(request: web.Request) -> web.StreamResponse:
    kind = request.path.split("/")[1]
    if kind == "null":
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": [None]}})
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    item = b'{"metric":{"alertname":"AcceleratorEccUncorrectable","node":"gpu-0"},"value":[1,"1"]},'
    chunk = item * (65536 // len(item))
    with contextlib.suppress(ConnectionError):
        await response.write(b'{"status":"success","data":{"resultType":"vector","result":[')
        for _ in range(300 * 2**20 // len(chunk)):
            await response.write(chunk)
        await response.write(item[:-1] + b"]}}")
    return response


def _probe(port: int, probes: list[float], stop: threading.Event) -> None:
    while not stop.is_set():
        probes.append(timed(f"http://127.0.0.1:{port}/healthz", timeout=30))
        time.sleep(0.1)


def recheck(tree: Path, tmp: Path, bg: Background) -> None:
    app = web.Application()
    app.router.add_route("*", "/{kind}/api/v1/query", _garbage)
    runner, prom_port = bg.serve(app)
    try:
        for kind, what in (("huge", "300 MB answer"), ("null", "[null] answer")):
            with remediation(tree, tmp, bg, f"http://127.0.0.1:{prom_port}/{kind}") as (ctl, fake):
                probes: list[float] = []
                stop = threading.Event()
                prober = threading.Thread(target=_probe, args=(ctl.port, probes, stop))
                prober.start()
                time.sleep(0.5)
                t0 = time.perf_counter()
                req = urllib.request.Request(
                    f"http://127.0.0.1:{ctl.port}/alertmanager/remediate",
                    data=drain_alert("gpu-0"),
                    headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
                )
                try:
                    with urllib.request.urlopen(req, timeout=120) as r:
                        answer = json.loads(r.read())
                except urllib.error.HTTPError as exc:
                    answer = {"status": exc.code, "body": exc.read()[:200].decode(errors="replace")}
                took = time.perf_counter() - t0
                time.sleep(0.5)
                stop.set()
                prober.join()
                taints = fake.get("nodes", "gpu-0")["spec"].get("taints") or []
                text = metrics_text(ctl.port)
                counts = {
                    r: sample(
                        text, "xpuwatch_remediation_rechecks_total", action="drain", result=r, step="taint"
                    )
                    for r in ("holds", "unreachable", "unreadable")
                }
                results = (
                    [x.get("result") for x in answer.get("results", [])] if "results" in answer else answer
                )
                print(
                    f"  {what}: webhook answered in {took:.2f} s ({results}); slowest /healthz meanwhile "
                    f"{max(probes) * 1000:.0f} ms; controller peak RSS {ctl.peak_rss_mib():.0f} MiB; node tainted: "
                    f"{bool(taints)}; rechecks {counts}"
                )
    finally:
        bg.run(runner.cleanup())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", type=Path, help="another source tree, run first")
    parser.add_argument("--only", default="bombs,unread,recheck,slowbody")
    args = parser.parse_args()
    runs = args.only.split(",")
    print(
        f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}, {os.cpu_count()} CPUs"
    )
    bomb = gzip_bomb(1024) if "bombs" in runs else b""
    if bomb:
        print(f"bomb: {len(bomb) / 2**20:.2f} MiB of gzip, 1 GiB inflated")
    bg = Background()
    trees = ([("baseline " + str(args.baseline), args.baseline)] if args.baseline else []) + [
        ("this tree", ROOT)
    ]
    try:
        for name, tree in trees:
            print(name)
            for run in runs:
                with tempfile.TemporaryDirectory(prefix="xpuwatch-hostile-") as tmp:
                    if run == "bombs":
                        bombs(tree, Path(tmp), bg, bomb)
                    elif run == "unread":
                        unread(tree, Path(tmp))
                    elif run == "recheck":
                        recheck(tree, Path(tmp), bg)
                    elif run == "slowbody":
                        slowbody(tree, Path(tmp))
                    elif run == "report":
                        report(tree, Path(tmp), bg)
            print(f"load after: {os.getloadavg()[0]:.2f}")
    finally:
        bg.stop()


if __name__ == "__main__":
    main()
