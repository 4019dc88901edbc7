"""Sample Alertmanager payloads every channel's templates must render at start-up (and in CI)."""

from __future__ import annotations

from typing import Any

_GPU_LABELS = {
    "alertname": "AcceleratorEccUncorrectable",
    "category": "hardware",
    "severity": "critical",
    "action": "drain",
    "node": "sim-node-1",
    "vendor": "nvidia",
    "model": "NVIDIA A100-SXM4-80GB",
    "device": "0",
    "uuid": "GPU-00000000-0000-0000-0000-000000000000",
    "namespace": "ml-team",
    "pod": "train-0",
    "container": "main",
    "workload_kind": "job",
    "owner": "",
}
_ANNOTATIONS = {
    "summary": "Uncorrectable ECC errors on sim-node-1 GPU 0",
    "description": "3 uncorrectable ECC errors in 5m",
    "runbook_url": "https://runbooks.example.internal/xpuwatch/AcceleratorEccUncorrectable",
}


def _alert(status: str, **labels: str) -> dict[str, Any]:
    return {
        "status": status,
        "labels": {**_GPU_LABELS, **labels},
        "annotations": dict(_ANNOTATIONS),
        "startsAt": "2024-05-01T10:00:00.123456789Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2024-05-01T10:15:00Z",
        "generatorURL": "http://prometheus.example.internal:9090/graph?g0.expr=x&g0.tab=1",
        "fingerprint": f"{hash((status, tuple(sorted(labels.items())))) & 0xFFFFFFFFFFFF:016x}",
    }


def _payload(status: str, alerts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}/{category="hardware"}:{alertname="AcceleratorEccUncorrectable"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "oncall-wecom",
        "groupLabels": {"alertname": "AcceleratorEccUncorrectable"},
        "commonLabels": {"alertname": "AcceleratorEccUncorrectable", "category": "hardware"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example.internal:9093",
        "alerts": alerts,
    }


SAMPLES: tuple[dict[str, Any], ...] = (
    _payload("firing", [_alert("firing")]),
    _payload("resolved", [_alert("resolved")]),
    _payload("firing", [_alert("firing", device="1"), _alert("resolved", device="2")]),
    _payload(
        "firing",
        [_alert("firing", device="3", pod='we"ird\\pod', note="line1\nline2 </at> <@all> [x](y) *_~` 中文")],
    ),
)
