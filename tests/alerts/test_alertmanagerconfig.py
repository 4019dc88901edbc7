"""alerts/alertmanagerconfig.py: the generated alertmanager.yml translated to an AlertmanagerConfig."""

from __future__ import annotations

import pytest
import yaml

from xpuwatch.alerts.alertmanager import Endpoints, build_config
from xpuwatch.alerts.alertmanagerconfig import from_config, matcher, render_alertmanagerconfig
from xpuwatch.alerts.spec import load_spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('category="hardware"', {"name": "category", "value": "hardware"}),  # "=" is the operator's default
        ('action=~"drain|reclaim"', {"name": "action", "matchType": "=~", "value": "drain|reclaim"}),
        ('alertname!="X"', {"name": "alertname", "matchType": "!=", "value": "X"}),
        ('uuid!~".+"', {"name": "uuid", "matchType": "!~", "value": ".+"}),
        (r'msg="say \"hi\"\\"', {"name": "msg", "value": 'say "hi"\\'}),
    ],
)
def test_matcher(text: str, expected: dict[str, str]) -> None:
    assert matcher(text) == expected


@pytest.mark.parametrize("text", ["category=hardware", 'a b="c"', 'x=="y"', '="v"', ""])
def test_matcher_rejects_what_it_cannot_translate(text: str) -> None:
    with pytest.raises(ValueError, match="not an Alertmanager matcher"):
        matcher(text)


def test_receiver_other_than_a_webhook_is_a_clear_error() -> None:
    config = build_config(load_spec())
    config["receivers"].append({"name": "mail", "email_configs": [{"to": "a@b"}]})
    with pytest.raises(
        ValueError, match=r"receiver mail: only webhook_configs translate, not \['email_configs'\]"
    ):
        from_config(config)


def test_endpoints_follow_the_generator_flags_and_the_text_loads_with_pyyaml() -> None:
    text = render_alertmanagerconfig(
        load_spec(),
        Endpoints(relay_url="http://r:1", relay_credentials_file="/s/x/relay-token"),
    )
    amc = yaml.safe_load(text)
    hooks = {r["name"]: r["webhookConfigs"][0] for r in amc["spec"]["receivers"]}
    assert hooks["oncall-wecom"]["url"] == "http://r:1/alertmanager/oncall-wecom"
    assert hooks["oncall-wecom"]["httpConfig"]["authorization"]["credentials"] == {
        "name": "xpuwatch-alertmanager",
        "key": "relay-token",
    }
    assert amc["metadata"]["namespace"] == "xpuwatch"
    assert "matchType: =\n" not in text


def test_out_of_band_meta_webhook_without_a_token_translates_without_http_config() -> None:
    """`rules generate --meta-url URL` without --meta-credentials-file: the second meta webhook has no
    http_config (failed with KeyError 'http_config' before)."""
    config = build_config(load_spec(), Endpoints(meta_url="https://pager.example/hook"))
    amc = from_config(config)
    meta = next(r for r in amc["spec"]["receivers"] if r["name"] == "xpuwatch-meta")
    assert [h["url"] for h in meta["webhookConfigs"]][-1] == "https://pager.example/hook"
    assert "httpConfig" not in meta["webhookConfigs"][-1]
    assert meta["webhookConfigs"][0]["httpConfig"]["authorization"]["credentials"]["key"] == "relay-token"
