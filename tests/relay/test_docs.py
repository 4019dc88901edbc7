"""The example configuration in docs/relay.md is valid and passes the start-up checks."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from xpuwatch.alerts.relay.config import parse_settings
from xpuwatch.alerts.relay.server import check_settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "relay.md"


def test_documented_example_config_loads(tmp_path):
    block = re.search(r"```yaml\n# relay.yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    assert block is not None
    doc = yaml.safe_load(block.group(1))
    doc["outbox"] = str(tmp_path / "o.sqlite")
    doc["auth"] = {
        "bearer_token_env": "RELAY_TOKEN",
        "basic_auth": {"username": "am", "password_env": "RELAY_PASSWORD"},
    }
    doc["channels"]["oncall-wecom"]["webhook_url_env"] = (
        doc["channels"]["oncall-wecom"].pop("webhook_url_file") and "WECOM_URL"
    )
    env = {
        "RELAY_TOKEN": "t",
        "RELAY_PASSWORD": "p",
        "WECOM_URL": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k",
        "FEISHU_TEAM_URL": "https://open.feishu.cn/open-apis/bot/v2/hook/x",
        "FEISHU_TEAM_SECRET": "s",
    }
    env |= {
        "DINGTALK_OPS_URL": "https://oapi.dingtalk.com/robot/send?access_token=t",
        "DINGTALK_OPS_SECRET": "SECx",
    }
    jinja = re.search(
        r"```jinja\n\{# dingtalk-alert.j2 #\}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL
    )
    assert jinja is not None
    (tmp_path / "dingtalk-alert.j2").write_text(jinja.group(1), encoding="utf-8")
    settings = parse_settings(doc, tmp_path, env)
    templates = check_settings(settings)
    assert sorted(templates) == ["oncall-wecom", "ops-dingtalk", "team-feishu"]
    assert settings.channels["ops-dingtalk"].mentions.severities == ("critical",)
    assert settings.channels["team-feishu"].keyword == "xpuwatch"
