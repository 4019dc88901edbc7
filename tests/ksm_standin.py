"""Stand-in for kube-state-metrics' pod metrics: a real HTTP server serving text exposition 0.0.4.

It serves what kube-state-metrics v2 serves for pods (kube-state-metrics docs/metrics/workload/pod-metrics.md):
``kube_pod_status_phase{namespace,pod,uid,phase}`` (one series per phase, 1 for the current one),
``kube_pod_status_scheduled{namespace,pod,uid,condition}`` (true/false/unknown), ``kube_pod_created`` (Unix
seconds) and ``kube_pod_container_resource_requests{namespace,pod,uid,container,node,resource,unit}`` with
the resource name written as kube-state-metrics writes it (``nvidia.com/gpu`` -> ``nvidia_com_gpu``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Pod = tuple[str, str, str, int, bool]  # namespace, pod, resource, count, scheduled

# (namespace, pod, resource, count, scheduled): two pods waiting an hour, one scheduled (pulling its image)
PODS = (
    ("ml", "train-big", "nvidia_com_gpu", 8, False),
    ("mlu", "ft-mlu", "cambricon_com_mlu", 4, False),
    ("ml", "pulling", "nvidia_com_gpu", 1, True),
)


def ksm_text(now: float, pods: Sequence[Pod] = PODS) -> str:
    lines = []
    for family, kind, help_ in (
        ("kube_pod_status_phase", "gauge", "The pods current phase."),
        ("kube_pod_status_scheduled", "gauge", "Describes the status of the scheduling process for the pod."),
        ("kube_pod_created", "gauge", "Unix creation timestamp"),
        (
            "kube_pod_container_resource_requests",
            "gauge",
            "The number of requested request resource by a container.",
        ),
    ):
        lines += [f"# HELP {family} {help_}", f"# TYPE {family} {kind}"]
        for ns, pod, resource, count, scheduled in pods:
            base = f'namespace="{ns}",pod="{pod}",uid="uid-{pod}"'
            if family == "kube_pod_status_phase":
                for phase in ("Pending", "Succeeded", "Failed", "Unknown", "Running"):
                    lines.append(f'{family}{{{base},phase="{phase}"}} {1 if phase == "Pending" else 0}')
            elif family == "kube_pod_status_scheduled":
                for cond in ("true", "false", "unknown"):
                    lines.append(
                        f'{family}{{{base},condition="{cond}"}} {int(cond == str(scheduled).lower())}'
                    )
            elif family == "kube_pod_created":
                lines.append(f"{family}{{{base}}} {now - 3600:.0f}")
            else:
                lines.append(
                    f'{family}{{{base},container="main",node="",resource="{resource}",unit="integer"}} {count}'
                )
                lines.append(f'{family}{{{base},container="main",node="",resource="cpu",unit="core"}} 4')
    return "\n".join(lines) + "\n"


@contextmanager
def serve(pods: Sequence[Pod] = PODS) -> Iterator[str]:
    """Serve the pods' series on a free loopback port; yields ``host:port``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = ksm_text(time.time(), pods).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
