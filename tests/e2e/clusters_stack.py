"""Two clusters, one view: the tested multi-cluster deployment of docs/deploy.md, on loopback.

Per cluster: the sim exporter (``xpuwatch serve --simulate``, its own seed, so uuids and readings differ
between clusters while node names repeat) scraped by a Debian Prometheus with ``external_labels: {cluster:
<name>}``, loading the per-cluster groups of alerts/generated/rules.yml (recording and hardware), sending its
alerts to the Alertmanager and ``remote_write``-ing everything (raw series, recorded series, ALERTS) into one
VictoriaMetrics single node (Debian's ``victoria-metrics``). ``vmalert`` evaluates the global group
(performance) against VictoriaMetrics, notifies the same Alertmanager and writes its ALERTS back. The
Alertmanager runs the generated routing tree with receivers pointing at a loopback webhook sink (standing in
for the relay and the remediation controller, per Alertmanager's <webhook_config> payload). The
relay/remediation metrics stand-in (tests/dashboards/pipeline_standin.py) is scraped by both Prometheus
servers so the Operations dashboard has its series in each cluster.

Used by tests/e2e/test_clusters_vm.py and benchmarks/remote_write.py; the configs written here are the ones
docs/deploy.md shows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests import ksm_standin
from tests.dashboards import pipeline_standin
from tests.dashboards.test_prometheus import ENV, ROOT, RULES, Prom, _wait
from tests.ports import free_port as _free_port
from xpuwatch.alerts.alertmanager import Endpoints, render_alertmanager
from xpuwatch.alerts.rules import GROUP_HARDWARE, GROUP_META, PERFORMANCE_GROUPS, RECORDING_GROUPS
from xpuwatch.alerts.spec import load_spec

AM_BIN = "/usr/bin/prometheus-alertmanager"
BINARIES = ("prometheus", "victoria-metrics", "vmalert", AM_BIN)
# Evaluated in each cluster's Prometheus: recording rules (so remote storage receives pre-aggregated
# series), the hardware alerts (they page; they must not depend on the remote-write path) and the meta alerts
# (the relay and the remediation controller run in each cluster): docs/deploy.md, benchmarks/fleet_scale.py.
PER_CLUSTER_GROUPS = (*RECORDING_GROUPS, GROUP_HARDWARE, GROUP_META)
# Evaluated once, over every cluster, by a ruler on the remote storage (vmalert, Thanos Ruler, Mimir ruler).
GLOBAL_GROUPS = PERFORMANCE_GROUPS


# The federation matcher docs/deploy.md gives: every recording rule (named level:metric:operation with the
# levels of alerts/rules.py) plus the device identity and liveness series, not the raw per-device readings.
FEDERATE_MATCH = '{__name__=~"device:.+|slice:.+|node:.+|vendor_model:.+|instance_node:.+|vendor:.+|pod:.+|namespace_resource:.+|namespace_owner:.+|holder:.+|queue:.+|accelerator_up|accelerator_info"}'


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if not shutil.which(b)]


def remote_write_config(vm_url: str) -> dict[str, Any]:
    """The ``remote_write`` entry docs/deploy.md gives (short send deadline: this test reads soon after)."""
    return {
        "url": f"{vm_url}/api/v1/write",
        "queue_config": {"batch_send_deadline": "1s", "min_backoff": "100ms", "max_backoff": "1s"},
    }


def prometheus_config(
    cluster: str,
    rules: Path,
    exporter: str,
    standin: str,
    vm_url: str,
    alertmanager: str,
    interval: str,
    ksm: str | None = None,
) -> dict[str, Any]:
    return {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            "external_labels": {"cluster": cluster},
        },
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [
            {"job_name": "xpuwatch", "static_configs": [{"targets": [exporter]}]},
            {"job_name": "xpuwatch-pipeline", "static_configs": [{"targets": [standin]}]},
            *([{"job_name": "kube-state-metrics", "static_configs": [{"targets": [ksm]}]}] if ksm else []),
        ],
        "remote_write": [remote_write_config(vm_url)],
    }


def split_rules(out: Path) -> tuple[Path, Path]:
    """alerts/generated/rules.yml split into the per-cluster and the global rule files."""
    groups = yaml.safe_load(RULES.read_text("utf-8"))["groups"]
    per_cluster, global_ = out / "rules-cluster.yml", out / "rules-global.yml"
    per_cluster.write_text(yaml.safe_dump({"groups": [g for g in groups if g["name"] in PER_CLUSTER_GROUPS]}))
    global_.write_text(yaml.safe_dump({"groups": [g for g in groups if g["name"] in GLOBAL_GROUPS]}))
    return per_cluster, global_


class _Sink(BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, Any]]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            self.received.append((self.path, json.loads(body)))
        except ValueError:
            self.send_response(400)
        else:
            self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@dataclasses.dataclass
class Stack:
    """Endpoints of the running stack; ``webhooks`` is what the Alertmanager delivered (path, payload)."""

    vm: Prom
    prometheus: dict[str, Prom]
    alertmanager: str
    vmalert: str
    webhooks: list[tuple[str, dict[str, Any]]]


@contextlib.contextmanager
def _webhook_sink() -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    received: list[tuple[str, dict[str, Any]]] = []
    handler = type("Sink", (_Sink,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def stack(tmp: Path, scenarios: dict[str, dict[str, Any]], interval: str = "1s") -> Iterator[Stack]:
    """Start everything (clusters named by ``scenarios``' keys); stop it all on exit, in reverse order."""
    per_cluster_rules, global_rules = split_rules(tmp)
    procs: list[subprocess.Popen[bytes]] = []
    logs = contextlib.ExitStack()

    def start(args: list[str], log: str, **kw: Any) -> subprocess.Popen[bytes]:
        """Start a process with its output in <tmp>/<log>.log (read it when a start-up wait fails)."""
        out = logs.enter_context(open(tmp / f"{log}.log", "wb"))  # noqa: SIM115 - closed by the ExitStack
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, **kw)
        procs.append(proc)
        return proc

    with (
        pipeline_standin.serve() as standin_port,
        ksm_standin.serve() as ksm_target,
        _webhook_sink() as (sink_url, webhooks),
    ):
        try:
            vm_port = _free_port()
            vm_url = f"http://127.0.0.1:{vm_port}"
            vm = start(
                [
                    "victoria-metrics",
                    f"-storageDataPath={tmp / 'vm'}",
                    f"-httpListenAddr=127.0.0.1:{vm_port}",
                    "-retentionPeriod=1d",
                    # answer with the newest samples (the default hides the last 30 s from queries)
                    "-search.latencyOffset=1s",
                    "-search.disableCache",
                ],
                "victoria-metrics",
            )
            _wait(f"{vm_url}/health", vm, "victoria-metrics")

            token = tmp / "token"
            token.write_text("t")
            am_config = tmp / "alertmanager.yml"
            spec = load_spec()
            ro = spec.routing
            fast = dataclasses.replace(
                ro,
                hardware=dataclasses.replace(ro.hardware, group_wait="1s"),
                performance=dataclasses.replace(ro.performance, group_wait="1s"),
                remediation=dataclasses.replace(ro.remediation, group_wait="1s"),
            )
            am_config.write_text(
                render_alertmanager(
                    dataclasses.replace(spec, routing=fast),
                    Endpoints(sink_url, sink_url, str(token), str(token)),
                )
            )
            am_port = _free_port()
            am = start(
                [
                    AM_BIN,
                    f"--config.file={am_config}",
                    f"--storage.path={tmp / 'am'}",
                    f"--web.listen-address=127.0.0.1:{am_port}",
                    "--cluster.listen-address=",
                ],
                "alertmanager",
            )
            am_url = f"http://127.0.0.1:{am_port}"
            _wait(f"{am_url}/-/ready", am, "alertmanager")

            proms: dict[str, Prom] = {}
            for cluster, scenario in scenarios.items():
                sim = tmp / f"sim-{cluster}.yaml"
                sim.write_text(yaml.safe_dump(scenario))
                exporter_port, prom_port = _free_port(), _free_port()
                config = tmp / f"prometheus-{cluster}.yml"
                config.write_text(
                    yaml.safe_dump(
                        prometheus_config(
                            cluster,
                            per_cluster_rules,
                            f"127.0.0.1:{exporter_port}",
                            f"127.0.0.1:{standin_port}",
                            vm_url,
                            f"127.0.0.1:{am_port}",
                            interval,
                            ksm_target,
                        )
                    )
                )
                exporter = start(
                    [
                        sys.executable,
                        "-m",
                        "xpuwatch",
                        "serve",
                        "--simulate",
                        f"--sim-config={sim}",
                        f"--web.listen-address=127.0.0.1:{exporter_port}",
                    ],
                    f"exporter-{cluster}",
                    env=ENV,
                    cwd=ROOT,
                )
                server = start(
                    [
                        "prometheus",
                        f"--config.file={config}",
                        f"--storage.tsdb.path={tmp / f'tsdb-{cluster}'}",
                        f"--web.listen-address=127.0.0.1:{prom_port}",
                    ],
                    f"prometheus-{cluster}",
                )
                _wait(f"http://127.0.0.1:{exporter_port}/metrics", exporter, f"exporter {cluster}")
                _wait(f"http://127.0.0.1:{prom_port}/-/ready", server, f"prometheus {cluster}")
                proms[cluster] = Prom(f"http://127.0.0.1:{prom_port}")

            vmalert_port = _free_port()
            vmalert_url = f"http://127.0.0.1:{vmalert_port}"
            vmalert = start(
                [
                    "vmalert",
                    f"-rule={global_rules}",
                    f"-datasource.url={vm_url}",
                    f"-remoteWrite.url={vm_url}",
                    f"-notifier.url={am_url}",
                    f"-evaluationInterval={interval}",
                    f"-httpListenAddr=127.0.0.1:{vmalert_port}",
                    f"-external.url={vmalert_url}",
                ],
                "vmalert",
            )
            _wait(f"{vmalert_url}/health", vmalert, "vmalert")
            yield Stack(Prom(vm_url), proms, am_url, vmalert_url, webhooks)
        finally:
            for p in reversed(procs):
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            logs.close()
