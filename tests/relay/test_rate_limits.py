"""Every documented rate-limit answer of every bot is a wait-and-retry, never a permanent failure; the
permanent answers stay permanent (they raise XpuwatchRelayMessagesFailing). The table is docs/relay.md's
"Bot answers" table, with the fixture each row comes from (tests/fixtures/<bot>/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuwatch.alerts.relay.bots import BOTS

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _body(bot: str, name: str) -> bytes:
    return (FIXTURES / bot / name).read_bytes()


RATE_LIMITED = [
    ("wecom", 200, _body("wecom", "resp-45009-rate-limited.json"), "45009"),
    ("wecom", 429, b"", "http_429"),
    ("feishu", 400, _body("feishu", "resp-9499-too-many-request_http400.json"), "9499"),
    ("feishu", 200, _body("feishu", "resp-11232-frequency-limited_http200.json"), "11232"),
    ("feishu", 429, b"", "http_429"),
    ("dingtalk", 200, _body("dingtalk", "resp-130101-send-too-fast.json"), "130101"),
    ("dingtalk", 200, _body("dingtalk", "resp-410100-send-too-fast.json"), "410100"),
    ("dingtalk", 200, b'{"errcode":90030,"errmsg":"webhook over limit"}', "90030"),
    ("dingtalk", 429, b"", "http_429"),
]

PERMANENT = [
    ("wecom", _body("wecom", "resp-93000-invalid-webhook-url.json"), "93000"),  # bad key
    ("wecom", _body("wecom", "resp-40058-markdown-too-long.json"), "40058"),  # too large
    ("feishu", _body("feishu", "resp-19021-sign-fail.json"), "19021"),  # bad signature
    ("feishu", _body("feishu", "resp-19024-keyword-not-found.json"), "19024"),  # keyword missing
    ("feishu", _body("feishu", "resp-9499-bad-request.json"), "9499"),  # malformed or too large
    ("dingtalk", _body("dingtalk", "resp-310000-sign-not-match.json"), "310000"),  # bad signature
    ("dingtalk", _body("dingtalk", "resp-310000-keywords-not-in-content.json"), "310000"),  # keyword
    ("dingtalk", _body("dingtalk", "resp-300001-token-not-exist.json"), "300001"),  # bad token
    ("dingtalk", _body("dingtalk", "resp-460101-message-too-long.json"), "460101"),  # too large
]


@pytest.mark.parametrize(("bot", "status", "body", "code"), RATE_LIMITED)
def test_rate_limit_answers_wait_and_retry(bot: str, status: int, body: bytes, code: str) -> None:
    outcome = BOTS[bot].classify(status, body)
    assert (outcome.result, outcome.code) == ("rate_limited", code)


@pytest.mark.parametrize(("bot", "body", "code"), PERMANENT)
def test_permanent_answers_stay_permanent(bot: str, body: bytes, code: str) -> None:
    status = 400 if code == "9499" else 200
    outcome = BOTS[bot].classify(status, body)
    assert (outcome.result, outcome.code) == ("permanent", code)


def test_the_docs_table_lists_every_rate_limit_code() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "relay.md").read_text(encoding="utf-8")
    section = doc.split("### Bot answers", 1)[1].split("\n## ", 1)[0]
    for _, _, _, code in RATE_LIMITED:
        assert f"`{code.removeprefix('http_')}`" in section or f"HTTP {code[5:]}" in section, code


@pytest.mark.parametrize("bot", sorted(BOTS))
def test_an_answer_nested_past_the_recursion_limit_is_a_retry_not_a_crash(bot: str) -> None:
    """Fails on main: 100,000 ``[`` from a bot (or a proxy in front of it) raised RecursionError in the
    sender instead of being an answer it cannot read."""
    outcome = BOTS[bot].classify(200, b"[" * 100_000)
    assert (outcome.result, outcome.code) == ("retry", "bad_response")
