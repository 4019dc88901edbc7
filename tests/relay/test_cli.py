"""`xpuwatch relay` on the command line: --check, and refusing a config that cannot work (exit code 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xpuwatch", "relay", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "WECOM_URL": "http://127.0.0.1:9/x"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_check_accepts_good_config_and_refuses_email_mentions(tmp_path):
    (tmp_path / "token").write_text("t")
    good = {
        "auth": {"bearer_token_file": "token"},
        "channels": {"oncall-wecom": {"type": "wecom", "webhook_url_env": "WECOM_URL"}},
    }
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(good))
    ok = run("--config", str(tmp_path / "good.yaml"), "--check")
    assert (ok.returncode, ok.stdout) == (0, "config OK: 1 channel(s)\n")
    bad = {
        **good,
        "channels": {
            "f": {"type": "feishu", "webhook_url_env": "WECOM_URL", "mentions": {"emails": ["a@b.c"]}}
        },
    }
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    refused = run("--config", str(tmp_path / "bad.yaml"))
    assert refused.returncode == 2
    assert "channels.f.mentions.emails: custom group bots cannot mention by email" in refused.stderr
