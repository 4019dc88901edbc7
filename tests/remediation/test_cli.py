"""``xpuwatch remediate`` as a real process against the fake API server: dry-run end to end."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.remediation.kit import am_alert, am_payload, drain_labels

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def write_config(tmp: Path, kube_url: str, port: int) -> Path:
    (tmp / "token").write_text("cli-token\n")
    cfg = tmp / "remediate.yaml"
    cfg.write_text(
        f"""
rules: [{{action: drain}}]
webhook: {{listen_host: 127.0.0.1, listen_port: {port}, bearer_token_file: token}}
guard: {{max_disrupted_ratio: 1.0}}
kube: {{host: "{kube_url}"}}
leader: {{identity: cli-0, lease_namespace: xpuwatch, retry_period_seconds: 0.2}}
audit_path: {tmp / "audit.jsonl"}
tick_seconds: 0.2
"""
    )
    return cfg


async def test_check_prints_effective_settings_with_secrets_masked(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, "http://127.0.0.1:1", 9853)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "xpuwatch",
        "remediate",
        "--config",
        str(cfg),
        "--check",
        "--apply",
        env=ENV,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    doc = json.loads(out)
    assert doc["webhook"]["bearer_token"] == "***"
    assert doc["guard"]["dry_run"] is False  # --apply
    assert doc["leader"]["identity"] == "cli-0"


async def test_bad_config_exits_2(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("webhook: {allow_unauthenticated: true}\nguard: {dry_run: maybe}\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "xpuwatch",
        "remediate",
        "--config",
        str(tmp_path / "bad.yaml"),
        env=ENV,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2 and b"guard.dry_run: expected true/false" in err


@pytest.mark.slow
async def test_dry_run_process_end_to_end(tmp_path: Path, fake, session) -> None:  # type: ignore[no-untyped-def]
    fake.add_node("gpu-0")
    fake.add_pod("train", "job-0", "gpu-0", {"nvidia.com/gpu": "1"})
    port = free_port()
    cfg = write_config(tmp_path, fake.url, port)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "xpuwatch",
        "remediate",
        "--config",
        str(cfg),
        env=ENV,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a bound for a loaded machine
        while time.monotonic() < deadline:
            try:
                async with session.get(base + "/readyz") as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("controller did not become ready")
        body = am_payload(am_alert(**drain_labels("gpu-0", "GPU-0", namespace="train", pod="job-0")))
        headers = {"Authorization": "Bearer cli-token"}
        deadline = time.monotonic() + 120  # a bound for a loaded machine
        while time.monotonic() < deadline:  # until this replica holds the lease
            async with session.post(base + "/alertmanager/remediate", json=body, headers=headers) as r:
                if r.status != 503:
                    doc = await r.json()
                    break
            await asyncio.sleep(0.05)
        assert r.status == 200 and doc["results"][0]["result"] == "dry-run"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 0, out.decode()[-2000:]
    assert fake.get("pods", "job-0", "train") is not None and fake.evictions == []
    assert "taints" not in fake.get("nodes", "gpu-0")["spec"]  # type: ignore[index]
    assert [e["reason"] for e in fake.list("events")] == ["DryRun"]
    lines = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(x["event"], x.get("mode")) for x in lines] == [("decision", "dry-run"), ("step", "dry-run")]
    assert fake.get("leases", "xpuwatch-remediation", "xpuwatch")["spec"]["holderIdentity"] == ""  # type: ignore[index]


@pytest.mark.slow
async def test_metrics_carry_build_info_and_process_metrics(tmp_path: Path, fake, session) -> None:  # type: ignore[no-untyped-def]
    """Conventions (issue 12): --web.listen-address, --log.format=json, build_info and process_* on /metrics."""
    port = free_port()
    cfg = write_config(tmp_path, fake.url, 1)  # the flag below overrides webhook.listen_port
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "xpuwatch",
        "remediate",
        "--config",
        str(cfg),
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--log.format=json",
        env=ENV,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a bound for a loaded machine
        while time.monotonic() < deadline:
            try:
                async with session.get(base + "/metrics") as r:
                    if r.status == 200:
                        body = await r.text()
                        break
            except OSError:
                pass
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("controller did not listen")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert 'xpuwatch_build_info{python_version="' in body and 'version="0.1.0"' in body
    assert "process_resident_memory_bytes " in body and "python_gc_collections_total" in body
    assert "xpuwatch_remediation_leader" in body
    logs = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    assert any(doc["msg"].startswith("remediation controller starting") for doc in logs)


def test_check_masks_the_relay_token_and_passwords_in_notice_urls(tmp_path: Path) -> None:
    """--check printed notify_token in clear, and the demo's relay password in the notice URL."""
    from xpuwatch.remediation.cli import describe
    from xpuwatch.remediation.settings import parse

    (tmp_path / "relay-token").write_text("tok-123")
    s = parse(
        {
            "webhook": {"allow_unauthenticated": True},
            "notify_url": "http://remediation:pw-1@127.0.0.1:9852/alertmanager/team-feishu",
            "notify": {"hardware": "http://remediation:pw-2@relay:9852/alertmanager/oncall-wecom"},
            "notify_token_file": "relay-token",
        },
        tmp_path,
    )
    text = describe(s)
    assert "tok-123" not in text and "pw-1" not in text and "pw-2" not in text
    doc = json.loads(text)
    assert doc["notify_token"] == "***"
    assert doc["notify_url"] == "http://remediation:***@127.0.0.1:9852/alertmanager/team-feishu"
    assert doc["notify"] == {"hardware": "http://remediation:***@relay:9852/alertmanager/oncall-wecom"}


def test_the_audit_log_is_appended_and_never_written_through_a_link(tmp_path: Path) -> None:
    import errno
    from datetime import UTC, datetime

    from xpuwatch.remediation.audit import Audit

    now = datetime(2026, 1, 1, tzinfo=UTC)
    log = tmp_path / "audit.jsonl"
    Audit(path=log).write(now, "a")
    Audit(path=log).write(now, "b")
    assert [json.loads(x)["event"] for x in log.read_text().splitlines()] == ["a", "b"]
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "planted.jsonl"
    link.symlink_to(victim)
    with pytest.raises(OSError) as err:
        Audit(path=link).write(now, "c")
    assert err.value.errno == errno.ELOOP and victim.read_text() == "precious\n"
