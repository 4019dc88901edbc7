"""Feishu signing against the known vector (Feishu custom-bot guide algorithm; alerting.md §3)."""

from __future__ import annotations

from xpuwatch.alerts.relay.signing import feishu_sign, sign_body


def test_known_vector():
    assert feishu_sign(1599360473, "demo") == "l1N0gAcBjdwBvGm1xMjOF0XSyaLRpR7tuO5dHfhAYc8="


def test_not_the_dingtalk_variant():
    assert not feishu_sign(1599360473, "demo").startswith("DkEDUyVo")


def test_sign_body_puts_seconds_timestamp_and_sign_in_the_body():
    body = {"msg_type": "text", "content": {"text": "x"}}
    assert sign_body(body, "demo", 1599360473.9) == {
        "timestamp": "1599360473",
        "sign": "l1N0gAcBjdwBvGm1xMjOF0XSyaLRpR7tuO5dHfhAYc8=",
        "msg_type": "text",
        "content": {"text": "x"},
    }
    assert sign_body(body, "", 1599360473) is body
