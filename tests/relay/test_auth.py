"""Relay inbound auth through the shared checker (exporter.credentials): a bcrypt ``password_hash_file``
is accepted, a wrong password is refused, a plain hash-shaped mistake in the config is refused at start."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import bcrypt
import pytest

from tests.relay.fakebots import FakeWeCom
from tests.relay.harness import settings_for, start_relay
from xpuwatch.alerts.relay.config import ConfigError, RateLimit, parse_settings

PAYLOAD = Path(__file__).parent.parent / "fixtures" / "alertmanager" / "am-issue2447-firing-captured.json"


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_password_hash_file_is_read_and_must_be_bcrypt(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k\n")
    go_hash = bcrypt.hashpw(b"pa:ss", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)
    (tmp_path / "hash").write_text(go_hash + "\n")
    (tmp_path / "plain").write_text("pa:ss\n")
    doc = {"channels": {"w": {"type": "wecom", "webhook_url_file": "url"}}}
    s = parse_settings(
        {**doc, "auth": {"basic_auth": {"username": "am", "password_hash_file": "hash"}}}, tmp_path, {}
    )
    assert (s.auth.basic_username, s.auth.basic_password_hash, s.auth.basic_password) == ("am", go_hash, "")
    with pytest.raises(ConfigError, match=r"auth.basic_auth.password_hash_file: not a bcrypt hash"):
        parse_settings(
            {**doc, "auth": {"basic_auth": {"username": "am", "password_hash_file": "plain"}}}, tmp_path, {}
        )
    with pytest.raises(ConfigError, match="not both"):
        parse_settings(
            {
                **doc,
                "auth": {
                    "basic_auth": {"username": "am", "password_hash_file": "hash", "password_file": "plain"}
                },
            },
            tmp_path,
            {},
        )


async def test_bcrypt_basic_auth_over_http(tmp_path: Path) -> None:
    wecom = FakeWeCom(limits=(RateLimit(20, 0.2),))
    await wecom.start()
    (tmp_path / "hash").write_text(bcrypt.hashpw(b"pa:ss", bcrypt.gensalt(4)).decode())
    channels = {"oncall": {"type": "wecom", "url": wecom.url()}}
    settings = settings_for(
        tmp_path, channels, auth={"basic_auth": {"username": "am", "password_hash_file": "hash"}}
    )
    h = await start_relay(settings)
    body = json.loads(PAYLOAD.read_text())
    try:
        assert (await h.post("oncall", body, token="", headers=basic("am", "pa:ss")))[0] == 200
        assert (await h.post("oncall", body, token="", headers=basic("am", "nope")))[0] == 401
        assert (await h.post("oncall", body, token="", headers=basic("bm", "pa:ss")))[0] == 401
        assert (await h.post("oncall", body, token="bearer-is-not-configured"))[0] == 401
        await h.settle()
    finally:
        await h.close()
        await wecom.stop()
    assert len(wecom.accepted) >= 1
