"""What-if: a week of known alerts backfilled into a REAL Prometheus (Debian's promtool + prometheus) and
loaded into a REAL VictoriaMetrics (Debian's victoria-metrics), replayed by ``xpuwatch remediate --what-if``.

The week (relative to its start S, cap 2 nodes, cooldown and healthy-for 1 h, Alertmanager repeat 4 h):
- day 1 10:00-10:30 ECC on n0, held by ml/train-a (from ``accelerator_allocated``): drained, train-a evicted;
- day 2 08:00 ECC on n1, n2 (2 h) and n3 (6 h) at once: n1 and n2 drained, n3 held by the cap; n1 and n2
  lift 1 h after resolving (10:59), so n3 drains at Alertmanager's repeat at 12:00;
- day 3 09:00-09:20 ECC on n4, held by kube-system/dcgm: drained, the protected holder not evicted;
- day 5 09:00-15:00 idle notebook ml-nb/jupyter-alice on n5 (holding its device 08:00-15:00): owner notified
  at 09:00, stopped after the 30 min grace at 09:30, its device freed until its last sample at 14:59.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.remediation.kit import Clock
from xpuwatch.exporter.catalog import ALLOCATED, INFO
from xpuwatch.remediation.alert import Alert
from xpuwatch.remediation.audit import Audit
from xpuwatch.remediation.controller import Controller
from xpuwatch.remediation.settings import DrainSettings, GuardSettings, ReclaimSettings, Rule, Settings
from xpuwatch.remediation.telemetry import Telemetry
from xpuwatch.remediation.whatif import Episode, Holding, alert_of, replay
from xpuwatch.remediation.whatif_cli import what_if

STEP = 60
END = int(time.time()) // 3600 * 3600 - 3600  # an hour back: VictoriaMetrics hides the latest 30 s
START = END - 7 * 86400
NODES = [f"n{i}" for i in range(10)]
RULES = (Rule("drain"), Rule("reclaim", alertnames=("AcceleratorIdleNotebook",)))
SETTINGS = Settings(
    rules=RULES,
    guard=GuardSettings(dry_run=False, max_disrupted_nodes=2, max_disrupted_ratio=1.0, cooldown_seconds=3600),
    drain=DrainSettings(default_mode="immediate", healthy_for_seconds=3600),
    reclaim=ReclaimSettings(grace_seconds=1800),
)


def at(day: int, hour: float) -> int:
    return START + (day - 1) * 86400 + int(hour * 3600)


def ecc(node: str) -> dict[str, str]:
    return {
        "alertname": "AcceleratorEccUncorrectable",
        "action": "drain",
        "category": "hardware",
        "severity": "critical",
        "node": node,
        "uuid": f"GPU-{node}-0",
        "device": "0",
        "vendor": "nvidia",
    }


IDLE = {
    "alertname": "AcceleratorIdleNotebook",
    "action": "reclaim",
    "category": "performance",
    "severity": "warning",
    "node": "n5",
    "uuid": "GPU-n5-0",
    "namespace": "ml-nb",
    "pod": "jupyter-alice",
    "owner": "alice",
}
# (labels, first sample, last sample): samples every minute in between
ALERTS = [
    (ecc("n0"), at(1, 10), at(1, 10.5) - STEP),
    (ecc("n1"), at(2, 8), at(2, 10) - STEP),
    (ecc("n2"), at(2, 8), at(2, 10) - STEP),
    (ecc("n3"), at(2, 8), at(2, 14) - STEP),
    (ecc("n4"), at(3, 9), at(3, 9 + 1 / 3) - STEP),
    (IDLE, at(5, 9), at(5, 15) - STEP),
]
# (node, uuid, namespace, pod, first, last)
HOLDERS = [
    ("n0", "GPU-n0-0", "ml", "train-a", START, END),
    ("n4", "GPU-n4-0", "kube-system", "dcgm", START, END),
    ("n5", "GPU-n5-0", "ml-nb", "jupyter-alice", at(5, 8), at(5, 15) - STEP),
]


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(d.items())) + "}"


def lines(ts_unit: int = 1) -> Iterator[str]:
    """The week as exposition lines; timestamps in seconds (OpenMetrics) or ``ts_unit`` = 1000 (ms)."""
    yield f"# TYPE {INFO} gauge"
    for n in NODES:
        info = {"node": n, "uuid": f"GPU-{n}-0", "device": "0", "vendor": "nvidia", "model": "A100"}
        for t in range(START, END + 1, 600):
            yield f"{INFO}{_labels(info)} 1 {t * ts_unit}"
    yield f"# TYPE {ALLOCATED} gauge"
    for node, uuid, ns, pod, first, last in HOLDERS:
        hl = {"node": node, "uuid": uuid, "namespace": ns, "pod": pod, "container": "main"}
        for t in range(first, last + 1, STEP):
            yield f"{ALLOCATED}{_labels(hl)} 1 {t * ts_unit}"
    yield "# TYPE ALERTS gauge"
    for labels, first, last in ALERTS:
        for t in range(first, last + 1, STEP):
            yield f"ALERTS{_labels({**labels, 'alertstate': 'firing'})} 1 {t * ts_unit}"


def _ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "server exited"
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"{url} not ready")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        pytest.skip("Debian's prometheus and promtool are required")
    tmp = tmp_path_factory.mktemp("whatif")
    om = tmp / "week.om"
    om.write_text("\n".join([*lines(), "# EOF"]) + "\n")
    made = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(tmp / "data")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    (tmp / "prometheus.yml").write_text("global: {}\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=30d",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _ready(f"http://127.0.0.1:{port}/-/ready", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def victoriametrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not shutil.which("victoria-metrics"):
        pytest.skip("Debian's victoria-metrics is required")
    tmp = tmp_path_factory.mktemp("whatif-vm")
    port = free_port()
    proc = subprocess.Popen(
        [
            "victoria-metrics",
            f"-storageDataPath={tmp / 'vm'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=30d",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _ready(f"{url}/health", proc)
        body = "\n".join(x for x in lines(1000) if not x.startswith("#")).encode() + b"\n"
        req = urllib.request.Request(f"{url}/api/v1/import/prometheus", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 204
        with urllib.request.urlopen(f"{url}/internal/force_flush", timeout=30):
            pass
        deadline = time.monotonic() + 30
        q = urllib.parse.urlencode({"query": "count(last_over_time(ALERTS[8d]))", "time": str(END)})
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
                res = json.load(r)["data"]["result"]
            if res and res[0]["value"][1] == str(len(ALERTS)):
                break
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _check_week(w: dict[str, object]) -> None:
    acts = {a["action"]: a for a in w["actions"]}  # type: ignore[attr-defined]
    drain, reclaim = acts["drain"], acts["reclaim"]
    assert w["nodes_total"] == 10 and w["cap"] == 2 and w["alert_episodes"] == 6
    assert drain["runs"] == 5
    assert drain["targets"] == ["node/n0", "node/n1", "node/n2", "node/n3", "node/n4"]
    assert drain["held_by_cap"] == 1 and drain["held_then_ran"] == 1
    assert drain["evicted"] == ["n0: ml/train-a"]  # kube-system/dcgm is protected
    assert w["max_disrupted"]["nodes"] == 2  # type: ignore[index]
    assert w["max_disrupted"]["which"] == ["n1", "n2"]  # type: ignore[index]
    assert reclaim["runs"] == 1 and reclaim["reclaimed"] == ["ml-nb/jupyter-alice"]
    # stopped at 09:30; the last sample of its holding is 14:59
    assert reclaim["gpu_hours_freed"] == pytest.approx(5.5 - STEP / 3600, abs=0.001)
    decisions = [
        (d["at"], d["target"], d["step"], d["refusal"])
        for d in w["decisions"]  # type: ignore[attr-defined]
        if d["target"] == "node/n3"
    ]
    t = datetime.fromtimestamp(at(2, 8), UTC)
    assert decisions[0] == (t.strftime("%Y-%m-%dT%H:%M:%SZ"), "node/n3", "start", "cap")
    assert decisions[1][0] == (t + timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert decisions[1][2:] == ("start", "")


@pytest.mark.slow
def test_what_if_counts_a_backfilled_week_in_prometheus(prometheus: str) -> None:
    w = what_if(SETTINGS, prometheus, 7 * 86400, STEP, end=END)
    _check_week(w.to_json())


def test_what_if_reads_victoriametrics_the_same(victoriametrics: str, prometheus: str) -> None:
    vm = what_if(SETTINGS, victoriametrics, 7 * 86400, STEP, end=END).to_json()
    _check_week(vm)
    assert vm == what_if(SETTINGS, prometheus, 7 * 86400, STEP, end=END).to_json()


@pytest.mark.slow
def test_cli_writes_json_and_html_and_fails_in_one_line(prometheus: str, tmp_path: Path) -> None:
    cfg = tmp_path / "remediate.yaml"
    cfg.write_text(
        "webhook: {allow_unauthenticated: true}\n"
        "rules: [{action: drain}, {action: reclaim, alertnames: [AcceleratorIdleNotebook]}]\n"
        "guard: {max_disrupted_nodes: 2, max_disrupted_ratio: 1.0}\n"
    )
    base = [str(Path(sys.executable).parent / "xpuwatch"), "remediate", "--config", str(cfg), "--what-if"]
    out = tmp_path / "w.json"
    run = subprocess.run(
        [*base, "--prometheus", prometheus, "--range", "8d", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "drain: would run 5 times on 5 targets" in run.stdout
    assert "largest number of nodes disrupted at once: 2" in run.stdout
    assert json.loads(out.read_text())["actions"][0]["runs"] == 5
    html = tmp_path / "w.html"
    run = subprocess.run(
        [*base, "--prometheus", prometheus, "--range", "8d", "-o", str(html)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and "<td>node/n3</td>" in html.read_text()
    empty = subprocess.run(
        [*base, "--prometheus", prometheus, "--range", "1h"], capture_output=True, text=True, timeout=60
    )
    assert empty.returncode == 1 and empty.stderr.count("\n") == 1
    assert empty.stderr.startswith("xpuwatch: what-if: ") and "accelerator_info" in empty.stderr
    for bad in (["--step", "0s"], ["--range", "0s"], ["--nodes", "0"], ["-o", "w.txt"]):
        r = subprocess.run(
            [*base, "--prometheus", prometheus, *bad], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and r.stderr.startswith("xpuwatch: what-if: ")
    gone = subprocess.run(
        [*base, "--prometheus", f"http://127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=60
    )
    assert gone.returncode == 1 and gone.stderr.count("\n") == 1 and "cannot reach" in gone.stderr


# ------------------------------------------------------------- the live controller gives the same decisions
def _episodes() -> list[Episode]:
    def t(day: int, hour: float) -> datetime:
        return datetime.fromtimestamp(at(day, hour), UTC)

    eps = [Episode(ecc(n), t(1, 1), t(1, 3)) for n in ("n0", "n1", "n2", "n3")]
    eps.append(Episode(ecc("n4"), t(1, 2), t(1, 2.5)))  # held, resolves before any room: never runs
    eps.append(Episode(ecc("n0"), t(1, 3.5), t(1, 4)))  # n0 again while lifting: extend
    eps.append(Episode({**ecc("n1"), "uuid": "GPU-n1-1"}, t(1, 6), t(1, 6.2)))  # after lift: cooldown? no
    eps.append(Episode(ecc("n5"), t(1, 7), None))
    return eps


@pytest.mark.slow
async def test_live_controller_decides_as_the_replay(fake, kube, session) -> None:  # type: ignore[no-untyped-def]
    eps = _episodes()
    step = 300
    start = datetime.fromtimestamp(at(1, 0), UTC)
    end = start + timedelta(hours=12)
    w = replay(eps, [], len(NODES), SETTINGS, start, end, step, repeat_interval_seconds=3600)
    for n in NODES:
        fake.add_node(n)
    clock = Clock(start)
    ctl = Controller(SETTINGS, kube, session, clock, Audit(keep=True, path="/dev/null"), Telemetry())
    # the same sends and ticks, in the same order (tick first at equal times)
    sends: list[tuple[datetime, int, Alert]] = []
    for i, e in enumerate(eps):
        s = e.start
        while s < (e.end or end) and s <= end:
            sends.append((s, i, alert_of(e, "firing")))
            s += timedelta(hours=1)
        if e.end:
            sends.append((e.end, i, alert_of(e, "resolved")))
    sends.sort(key=lambda x: (x[0], x[1]))
    t = start
    while t <= end:
        clock.now = t
        await ctl.tick()
        nxt = t + timedelta(seconds=step)
        for s_at, _, alert in [x for x in sends if t <= x[0] < nxt]:
            clock.now = s_at
            await ctl.handle([alert])
        t = nxt
    live = [
        (r["ts"], r["alert"], r["action"], r["step"], r["target"], r["allowed"], r["refusal"] or "")
        for r in ctl.audit.records or []
        if r["event"] == "decision"
    ]
    replayed = [
        (
            r.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            r.alert_key,
            r.action,
            r.step,
            r.target,
            r.allowed,
            r.refusal,
        )
        for r in w.records
    ]
    assert live == replayed
    steps = [(r[4], r[3], r[6]) for r in replayed]
    assert ("node/n4", "start", "cap") in steps and ("node/n0", "extend", "") in steps
    assert w.max_disrupted == 2


def test_holders_and_gpu_hours_from_allocation() -> None:
    t0 = datetime(2026, 11, 2, tzinfo=UTC)
    e = Episode(IDLE, t0, t0 + timedelta(hours=3))
    h = Holding("n5", "GPU-n5-0", "ml-nb", "jupyter-alice", t0 - timedelta(hours=1), t0 + timedelta(hours=5))
    w = replay([e], [h], 10, SETTINGS, t0 - timedelta(hours=1), t0 + timedelta(hours=6), 60)
    rec = next(a for a in w.actions if a.action == "reclaim")
    assert rec.reclaimed == ("ml-nb/jupyter-alice",)
    assert rec.gpu_hours_freed == pytest.approx(4.5)  # stop at t0+30min, device held until t0+5h


# --------------------------------------------------------------- what-if against a Prometheus that misbehaves
class _Garbage(http.server.BaseHTTPRequestHandler):
    """Stands in for ``POST /api/v1/query`` of the Prometheus HTTP API answering wrongly: ``/null`` a result of
    ``[null]``, ``/nan`` a node count of NaN, ``/hang`` nothing at all (it holds the connection)."""

    def do_POST(self) -> None:
        kind = self.path.split("/")[1]
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if kind == "hang":
            time.sleep(5)
            return
        result = [None] if kind == "null" else [{"metric": {}, "value": [1, "NaN"]}]
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def garbage() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("kind", "flags", "says"),
    [
        ("null", [], "Prometheus answered a series it cannot read: null"),
        ("nan", [], "answered a node count of nan: not a count"),
        ("hang", ["--timeout", "0.5"], "no complete answer within 0.5 s, decoding included (--timeout)"),
        ("hang", ["--timeout", "0"], "--timeout 0: expected seconds more than 0, at most a day"),
    ],
)
def test_what_if_fails_in_one_line_on_a_misbehaving_prometheus(
    garbage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, flags: list[str], says: str
) -> None:
    """Fails on main: ``[null]`` and a NaN count printed tracebacks, and against a hanging Prometheus the
    what-if waited 120 s, then suggested a ``--timeout`` it did not accept."""
    from xpuwatch.entry import build_parser

    cfg = tmp_path / "remediate.yaml"
    cfg.write_text("webhook: {allow_unauthenticated: true}\nrules: [{action: drain}]\n")
    args = build_parser().parse_args(
        ["remediate", "--config", str(cfg), "--what-if", "--prometheus", f"{garbage}/{kind}", *flags]
    )
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert err == f"xpuwatch: what-if: {err.removeprefix('xpuwatch: what-if: ').strip()}\n"
    assert says in err
