"""Rendering: limits, splitting, markers, links and UTF-8 intact, colours, time zones, templates, mentions."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.relay.fakebots import check_feishu, check_wecom
from tests.relay.test_delivery import big_group
from xpuwatch.alerts.relay import feishu, wecom
from xpuwatch.alerts.relay.config import ConfigError, parse_settings
from xpuwatch.alerts.relay.render import Templates, compile_templates, neutralise, render
from xpuwatch.alerts.relay.server import check_settings
from xpuwatch.alerts.relay.webhook import parse_payload

LINK = re.compile(r"\[[^\]]*\]\([^)]*\)")


def channels(**over: dict) -> dict:
    base = {
        "w": {"type": "wecom", "webhook_url_env": "U"},
        "f": {"type": "feishu", "webhook_url_env": "U", "secret_env": "S"},
    }
    for k, v in over.items():
        base[k] = {**base.get(k, {}), **v}
    return base


def settings_of(chs: dict, **top):
    doc = {"auth": {"bearer_token_env": "S"}, "channels": chs, **top}
    return parse_settings(doc, Path("/nonexistent"), {"U": "http://127.0.0.1:9/x", "S": "sec"})


def rendered(doc: dict, name: str, **top):
    s = settings_of(channels(w={"max_parts": 20}, f={"max_parts": 20}), **top)
    t = check_settings(s)
    ch = s.channels[name]
    bot = {"wecom": wecom.BOT, "feishu": feishu.BOT}[ch.type]
    return render(parse_payload(doc), ch, bot, s.alertmanager_url, t[name])


def wecom_content(msg) -> str:
    return msg.body["markdown"]["content"]


def test_wecom_large_group_splits_within_4096_bytes_with_markers_and_every_alert_once():
    doc = big_group(40)
    doc["alerts"] += big_group(10, status="resolved", group="r")["alerts"]
    msgs = rendered(doc, "w")
    n = len(msgs)
    assert n >= 3
    seen = []
    for i, m in enumerate(msgs, start=1):
        c = wecom_content(m)
        assert len(c.encode()) <= wecom.MARKDOWN_MAX_BYTES
        assert check_wecom(m.body) is None
        assert c.startswith(f"## [FIRING:40 RESOLVED:10] AcceleratorEccUncorrectable ({i}/{n})\n")
        seen += re.findall(r"uuid=(GPU-\w+-\d{4})", c)
    assert seen == [f"GPU-g0-{i:04d}" for i in range(40)] + [f"GPU-r-{i:04d}" for i in range(10)]


def test_feishu_large_group_splits_within_20kb_signed():
    msgs = rendered(big_group(120), "f")
    assert len(msgs) >= 2
    seen = []
    for i, m in enumerate(msgs, start=1):
        raw = feishu.BOT.serialise(m.body, settings_of(channels()).channels["f"], 1_700_000_000)
        assert len(raw) <= 20_000
        assert check_feishu(json.loads(raw)) is None
        assert m.body["card"]["header"]["title"]["content"].endswith(f"({i}/{len(msgs)})")
        seen += re.findall(r"uuid=(GPU-\w+-\d{4})", json.dumps(m.body))
    assert seen == [f"GPU-g0-{i:04d}" for i in range(120)]


@pytest.mark.parametrize("name", ["w", "f"])
def test_oversized_alert_is_cut_between_characters_and_outside_links(name):
    lengths = range(1000, 1160, 3) if name == "w" else range(6150, 6300, 5)
    links_kept = set()
    for length in lengths:  # the cut point sweeps across the runbook and silence links
        doc = big_group(1)
        doc["alerts"][0]["annotations"] = {
            "summary": "中" * length,
            "runbook_url": "https://runbooks.example.internal/very/long/path/" + "x" * 300,
        }
        (msg,) = rendered(doc, name)
        text = wecom_content(msg) if name == "w" else json.dumps(msg.body, ensure_ascii=False)
        assert ("…(truncated)" in text or "…&#40;truncated&#41;" in text) == (text.count("](http") < 2)
        opened = text.count("](http")
        assert opened == len(LINK.findall(text.replace('\\"', '"')))  # every link complete
        links_kept.add(opened)
        if name == "w":
            assert len(text.encode()) <= wecom.MARKDOWN_MAX_BYTES
        else:
            assert feishu.BOT.fits(msg.body)
    assert links_kept == {0, 1, 2}  # the sweep cut before, between and after the two links


def test_colours_by_status_and_severity():
    def colour(sev: str, status: str = "firing") -> str:
        doc = big_group(1, status=status)
        doc["alerts"][0]["labels"]["severity"] = sev
        return rendered(doc, "f")[0].body["card"]["header"]["template"]

    assert [colour("critical"), colour("warning"), colour("info"), colour("critical", "resolved")] == [
        "red",
        "orange",
        "blue",
        "green",
    ]
    resolved = wecom_content(rendered(big_group(1, status="resolved"), "w")[0])
    assert '<font color="info">**Resolved (1)**</font>' in resolved


def test_times_in_channel_timezone_and_no_end_time_for_firing():
    firing = wecom_content(rendered(big_group(1), "w")[0])
    assert "> started: 2024-05-01 18:00:00 CST\n" in firing
    assert "ended" not in firing
    resolved = wecom_content(rendered(big_group(1, status="resolved"), "w")[0])
    assert "> started: 2024-05-01 18:00:00 CST, ended: 2024-05-01 18:05:00 CST" in resolved
    s = settings_of(channels(w={"timezone": "UTC"}))
    ch = s.channels["w"]
    msg = render(parse_payload(big_group(1)), ch, wecom.BOT, "", compile_templates(wecom.BOT, ch))[0]
    assert "> started: 2024-05-01 10:00:00 UTC" in wecom_content(msg)


def test_silence_link_uses_configured_alertmanager_url():
    c = wecom_content(rendered(big_group(1), "w", alertmanager_url="https://am.example.internal/")[0])
    (silence,) = re.findall(r"\[silence\]\(([^)]*)\)", c)
    assert silence.startswith("https://am.example.internal/#/silences/new?filter=%7Balertname%3D%22Accel")
    assert "alertmanager.example.internal:9093" not in c


def test_template_override_and_startup_validation():
    s = settings_of(channels(w={"templates": {"alert": "{{ alert.alertname }} on {{ alert.labels.node }}"}}))
    t = check_settings(s)
    assert "AcceleratorEccUncorrectable on node-0" in wecom_content(
        render(parse_payload(big_group(1)), s.channels["w"], wecom.BOT, "", t["w"])[0]
    )
    with pytest.raises(ConfigError, match=r"channels.w.templates.alert: line 1: unexpected end of template"):
        check_settings(settings_of(channels(w={"templates": {"alert": "{{ alert.x "}})))
    with pytest.raises(ConfigError, match=r"channels.w.templates: sample 0: UndefinedError"):
        check_settings(settings_of(channels(w={"templates": {"alert": "{{ alert.nope }}"}})))


def test_template_failing_at_runtime_falls_back_to_builtin():
    bad = "{% if alert.labels.node == 'boom' %}{{ 1 // 0 }}{% endif %}custom {{ alert.alertname }}"
    s = settings_of(channels(w={"templates": {"alert": bad}}))
    t: Templates = check_settings(s)["w"]
    doc = big_group(1)
    doc["alerts"][0]["labels"]["node"] = "boom"
    from xpuwatch.alerts.relay.render import RenderStats

    stats = RenderStats()
    (msg,) = render(parse_payload(doc), s.channels["w"], wecom.BOT, "", t, stats)
    assert stats.fallbacks == 1
    assert "> device: node=boom" in wecom_content(msg)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"f": {"mentions": {"emails": ["a@example.com"]}}}, "cannot mention by email"),
        (
            {"w": {"mentions": {"open_ids": ["ou_1"]}}},
            "open_ids mean nothing to WeCom; WeCom mentions by users or mobiles",
        ),
        (
            {"f": {"mentions": {"users": ["bob"]}}},
            "users mean nothing to Feishu; Feishu mentions by open_ids or user_ids",
        ),
        ({"f": {"mentions": {"open_ids": ["bob@x"]}}}, "is not an open_id"),
        ({"w": {"mentions": {"mobiles": ["call me"]}}}, "is not a phone number"),
        ({"w": {"mentions": {"users": ["<@all>"]}}}, "is not a WeCom userid"),
        ({"w": {"secret_env": "S"}}, "signing secret only applies to feishu"),
        ({"w": {"timezone": "Mars/Base"}}, "unknown time zone"),
        ({"w": {"colour": "red"}}, "unknown keys ['colour']"),
        ({"w": {"type": "slack"}}, "type must be one of"),
        ({"w": {"webhook_url_env": "MISSING"}}, "environment variable 'MISSING' is unset"),
    ],
)
def test_config_that_cannot_work_is_refused_at_start(over, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_settings(settings_of(channels(**over)))


def test_config_requires_inbound_auth_and_reads_secret_files(tmp_path):
    (tmp_path / "url").write_text("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k\n")
    (tmp_path / "token").write_text("tok\n")
    doc = {"channels": {"w": {"type": "wecom", "webhook_url_file": "url"}}}
    with pytest.raises(ConfigError, match="auth: inbound webhooks need"):
        parse_settings(doc, tmp_path, {})
    s = parse_settings({**doc, "auth": {"bearer_token_file": "token"}}, tmp_path, {})
    assert s.channels["w"].webhook_url == "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k"
    assert s.auth.bearer_token == "tok"
    assert s.channels["w"].timezone == "Asia/Shanghai"


# --- escaping: hostile label and annotation text survives and cannot inject markup -----------------------
HOSTILE = st.lists(
    st.sampled_from([*list("ab \"'\\\n*_~`#[]()<>&@/=:"), "</at>", "<at id=all>", "<@all>", "告警", "显存"]),
    min_size=1,
    max_size=20,
).map("".join)
LABEL_NAMES = st.sampled_from(["node", "pod", "uuid", "note", "team", "job_name", "severity", "x1"])
HOSTILE_SETTINGS = settings_of(
    channels(w={"mentions": {"users": ["oncall"]}}, f={"mentions": {"open_ids": ["ou_1"]}})
)
HOSTILE_TEMPLATES = check_settings(HOSTILE_SETTINGS)
FULLWIDTH_BACK = str.maketrans({"＜": "<", "＞": ">", "｀": "`", "＊": "*", "］": "]", "＃": "#"})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(labels=st.dictionaries(LABEL_NAMES, HOSTILE, min_size=1, max_size=4), summary=HOSTILE)
def test_hostile_text_survives_and_injects_nothing(labels, summary):
    doc = big_group(1)
    alert = doc["alerts"][0]
    alert["labels"] = {"alertname": "X", **labels}
    alert["annotations"] = {"summary": summary}
    s, t = HOSTILE_SETTINGS, HOSTILE_TEMPLATES
    n = parse_payload(json.loads(json.dumps(doc)))
    (w,) = render(n, s.channels["w"], wecom.BOT, "", t["w"])
    (f,) = render(n, s.channels["f"], feishu.BOT, "", t["f"])
    content = wecom_content(w)
    assert check_wecom(w.body) is None
    assert content.count("<@") == 1 and content.endswith("<@oncall>")
    assert content.count("<font") == 2  # the section header and the status marker
    assert len(LINK.findall(content)) == content.count("](") == 1  # only the silence link
    plain = content.translate(FULLWIDTH_BACK)
    shown = [neutralise(v) for v in labels.values()]  # a newline in a label becomes a visible ␊
    assert not any(c in v for v in shown for c in "\n\r")
    for value in [summary, *shown]:
        assert value.strip() in plain
    raw = feishu.BOT.serialise(f.body, s.channels["f"], 1_700_000_000)
    assert json.loads(raw)["card"] == f.body["card"]
    assert check_feishu(json.loads(raw)) is None
    lark = "\n".join(e["text"]["content"] for e in f.body["card"]["elements"] if e["tag"] == "div")
    assert lark.count("<at ") == 1 and "<at id=ou_1></at>" in lark
    assert len(LINK.findall(lark)) == lark.count("](") == 1
    for value in [summary, *shown]:
        assert value.strip() in html.unescape(lark)


def test_part_budget_shrinks_with_the_bots_backlog():
    from xpuwatch.alerts.relay.render import part_budget

    s = settings_of(channels())
    w, f = s.channels["w"], s.channels["f"]
    assert [part_budget(w, wecom.BOT, b) for b in (0, 15, 17, 19, 20, 500)] == [5, 5, 3, 1, 1, 1]
    assert [part_budget(f, feishu.BOT, b) for b in (0, 97, 200)] == [5, 3, 1]


def test_every_annotation_shown_summary_description_first_then_in_order():
    doc = big_group(1)
    doc["alerts"][0]["annotations"] = {
        "alertAdvice": "检查 PCIe 链路",
        "description": "3 errors in 5m",
        "runbook_url": "https://runbooks.example.internal/ecc",
        "alertInfo": "GPU 1 掉卡",
        "summary": "ECC 不可纠正错误",
        "value": "3",
    }
    content = wecom_content(rendered(doc, "w")[0])
    quoted = [line for line in content.splitlines() if line.startswith("> ") and ":" not in line[:4]]
    assert quoted[:5] == [
        "> ECC 不可纠正错误",
        "> 3 errors in 5m",
        "> alertAdvice: 检查 PCIe 链路",
        "> alertInfo: GPU 1 掉卡",
        "> value: 3",
    ]
    assert "[runbook](https://runbooks.example.internal/ecc)" in content
    lark = json.dumps(rendered(doc, "f")[0].body, ensure_ascii=False)
    assert (
        lark.index("ECC 不可纠正错误")
        < lark.index("3 errors")
        < lark.index("alertAdvice")
        < lark.index("alertInfo")
    )


@pytest.mark.parametrize(
    "url", ["javascript:alert(1)", " JavaScript:alert(1)", "data:text/html,x", "file:///etc"]
)
def test_links_only_for_http_and_https(url):
    doc = big_group(1)
    doc["alerts"][0]["annotations"]["runbook_url"] = url
    content = wecom_content(rendered(doc, "w")[0])
    assert "](" + url.strip() not in content and "[runbook]" not in content
    assert "runbook: " in content  # shown as text, so the operator still sees it
    assert len(LINK.findall(content)) == 1  # the silence link only
    lark = rendered(doc, "f")[0].body
    assert "[runbook]" not in json.dumps(lark, ensure_ascii=False)


def test_control_characters_in_labels_are_made_visible_not_new_lines():
    doc = big_group(1)
    doc["alerts"][0]["labels"]["pod"] = "train-0\n## FIRING:0 all clear\r\x00\x1b[31m\u2028x"
    content = wecom_content(rendered(doc, "w")[0])
    (line,) = [x for x in content.splitlines() if "pod=" in x]
    assert "pod=train-0␊## FIRING:0 all clear␍␀␛[31m\ufffdx" in line
    assert not any(x.startswith("## FIRING:0") for x in content.splitlines())


def test_template_files_load_and_name_the_file_in_errors(tmp_path):
    (tmp_path / "alert.j2").write_text(
        "{{ alert.alertname }} · {{ alert.annotations.get('alertInfo') }}", encoding="utf-8"
    )
    (tmp_path / "strict.j2").write_text("{{ alert.annotations.alertInfo }}", encoding="utf-8")
    (tmp_path / "broken.j2").write_text("{% if alert.x %}unclosed", encoding="utf-8")
    env = {"U": "http://127.0.0.1:9/x", "S": "sec"}

    def load(files: dict, **more) -> object:
        chs = {"w": {"type": "wecom", "webhook_url_env": "U", "template_files": files, **more}}
        return parse_settings({"auth": {"bearer_token_env": "S"}, "channels": chs}, tmp_path, env)

    s = load({"alert": "alert.j2"})
    assert s.channels["w"].template_origins == {"alert": str(tmp_path / "alert.j2")}
    t = check_settings(s)
    doc = big_group(1)
    doc["alerts"][0]["annotations"]["alertInfo"] = "掉卡"
    assert "AcceleratorEccUncorrectable · 掉卡" in wecom_content(
        render(parse_payload(doc), s.channels["w"], wecom.BOT, "", t["w"])[0]
    )
    with pytest.raises(ConfigError, match=r"channels.w.template_files.alert \(.*broken.j2\): line 1: "):
        check_settings(load({"alert": "broken.j2"}))
    with pytest.raises(
        ConfigError, match=r"channels.w.template_files.alert \(.*strict.j2\): sample 0: Undefined"
    ):
        check_settings(load({"alert": "strict.j2"}))
    with pytest.raises(ConfigError, match=r"channels.w.template_files.alert: cannot read .*missing.j2"):
        load({"alert": "missing.j2"})
    with pytest.raises(ConfigError, match=r"give templates.alert or template_files.alert, not both"):
        load({"alert": "alert.j2"}, templates={"alert": "x"})
