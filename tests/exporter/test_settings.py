"""Settings: file < environment < flags, and every bad value fails naming its key."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xpuwatch.exporter.settings import ConfigError, load, parse, parse_listen_address, parse_web_config

HASH = "$2y$10$" + "a" * 53


def test_defaults() -> None:
    s = load(None, {}, {})
    assert s.web.listen_address == ":9851" and s.web.host_port == ("", 9851)
    assert s.web.telemetry_path == "/metrics" and s.web.config_file is None
    assert s.enable == () and s.node is None


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "x.yaml"
    cfg.write_text(
        "node: from-file\nenable: [nvml]\nweb: {listen_address: ':1111', telemetry_path: /m}\n"
        "backends:\n  nvml: {interval: 2, timeout: 3, stale_after: 9, lib: /opt/libnvidia-ml.so}\n"
    )
    s = load(str(cfg), {}, {})
    assert (s.node, s.enable, s.web.listen_address, s.web.telemetry_path) == (
        "from-file",
        ("nvml",),
        ":1111",
        "/m",
    )
    nv = s.backend("nvml")
    assert (nv.interval, nv.timeout, nv.stale_after, dict(nv.options)) == (
        2,
        3,
        9,
        {"lib": "/opt/libnvidia-ml.so"},
    )
    assert s.backend("amd").interval is None
    env = {
        "XPUWATCH_NODE": "from-env",
        "XPUWATCH_WEB_LISTEN_ADDRESS": "127.0.0.1:2222",
        "XPUWATCH_ENABLE": "amd,hygon",
    }
    s = load(str(cfg), env, {})
    assert (s.node, s.enable, s.web.listen_address) == ("from-env", ("amd", "hygon"), "127.0.0.1:2222")
    s = load(
        None, {**env, "XPUWATCH_CONFIG": str(cfg)}, {"node": "from-flag", "listen_address": "[::1]:3333"}
    )
    assert (s.node, s.web.listen_address, s.web.host_port) == ("from-flag", "[::1]:3333", ("::1", 3333))
    assert s.web.telemetry_path == "/m"  # still from the file


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"nodes": "x"}, "nodes: unknown key"),
        ({"node": ""}, "node: must be a non-empty string"),
        ({"enable": 5}, "enable: must be a list"),
        ({"web": {"listen_address": "9851"}}, "web.listen_address: '9851' is not [host]:port"),
        ({"web": {"listen_address": ":99999"}}, "web.listen_address"),
        ({"web": {"telemetry_path": "metrics"}}, "web.telemetry_path: 'metrics' must start with /"),
        ({"web": {"telemetry_path": "/healthz"}}, "web.telemetry_path"),
        ({"web": {"port": 1}}, "web.port: unknown key"),
        ({"backends": {"nvml": {"interval": 0}}}, "backends.nvml.interval: must be a number > 0"),
        ({"backends": {"nvml": {"timeout": "fast"}}}, "backends.nvml.timeout: must be a number > 0"),
        ({"backends": {"nvml": [1]}}, "backends.nvml: must be a mapping"),
        ([1], "config: must be a mapping"),
    ],
)
def test_bad_values_name_the_key(doc: object, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse(doc)
    assert message in str(exc.value)


def test_bad_flag_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^web.listen_address: 'localhost' is not"):
        load(None, {}, {"listen_address": "localhost"})
    with pytest.raises(ConfigError, match=r"^--config: cannot read /nonexistent.yaml"):
        load("/nonexistent.yaml", {}, {})


def test_listen_address_forms() -> None:
    assert parse_listen_address(":9851", "k") == ("", 9851)
    assert parse_listen_address("0.0.0.0:0", "k") == ("0.0.0.0", 0)


def test_web_config(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("x")
    (tmp_path / "k.pem").write_text("x")
    cfg = parse_web_config(
        {
            "tls_server_config": {"cert_file": "c.pem", "key_file": "k.pem"},
            "basic_auth_users": {"prom": HASH},
        },
        base=tmp_path,
    )
    assert cfg.tls is not None and cfg.tls.cert_file == str(tmp_path / "c.pem")
    assert cfg.tls.min_version == "TLS12" and dict(cfg.basic_auth_users) == {"prom": HASH}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"basic_auth_users": {"prom": "plaintext"}}, "basic_auth_users.prom: must be a bcrypt hash"),
        ({"tls_server_config": {"cert_file": "c.pem"}}, "tls_server_config.key_file: required"),
        (
            {"tls_server_config": {"cert_file": "nope.pem", "key_file": "k.pem"}},
            "tls_server_config.cert_file: ",
        ),
        (
            {"tls_server_config": {"cert_file": "c.pem", "key_file": "k.pem", "min_version": "SSL3"}},
            "min_version",
        ),
        (
            {
                "tls_server_config": {
                    "cert_file": "c.pem",
                    "key_file": "k.pem",
                    "client_auth_type": "RequireAndVerifyClientCert",
                }
            },
            "tls_server_config.client_ca_file: required",
        ),
        (
            {"tls_server_config": {"cert_file": "c.pem", "key_file": "k.pem", "cipher_suites": []}},
            "cipher_suites: not supported",
        ),
        ({"http_servr_config": {}}, "http_servr_config: unknown web config key"),
    ],
)
def test_bad_web_config_names_the_key(tmp_path: Path, doc: dict, message: str) -> None:
    (tmp_path / "c.pem").write_text("x")
    (tmp_path / "k.pem").write_text("x")
    with pytest.raises(ConfigError) as exc:
        parse_web_config(doc, base=tmp_path)
    assert message in str(exc.value)


def test_pod_mapping_section() -> None:
    s = parse(
        {
            "pod_mapping": {
                "enabled": True,
                "socket": "/run/k.sock",
                "interval": 30,
                "resource_prefixes": ["nvidia.com/"],
                "kube_api": True,
            }
        }
    )
    pm = s.pod_mapping
    assert (pm.enabled, pm.socket, pm.interval_seconds, pm.resource_prefixes, pm.kube_api) == (
        True,
        "/run/k.sock",
        30.0,
        ("nvidia.com/",),
        True,
    )
    assert parse({}).pod_mapping.enabled is False


def test_pod_mapping_grace_and_host_proc() -> None:
    d = parse({}).pod_mapping
    assert (d.grace_seconds, d.host_proc) == (300.0, None)
    pm = parse({"pod_mapping": {"grace": 0, "host_proc": "/hostfs/proc"}}).pod_mapping
    assert (pm.grace_seconds, pm.host_proc) == (0.0, "/hostfs/proc")
    assert parse({"pod_mapping": {"grace": 45.5}}).pod_mapping.grace_seconds == 45.5
    for bad in (-1, True, "5m"):
        with pytest.raises(ConfigError, match=r"pod_mapping\.grace"):
            parse({"pod_mapping": {"grace": bad}})
    with pytest.raises(ConfigError, match=r"pod_mapping\.host_proc"):
        parse({"pod_mapping": {"host_proc": ""}})


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"pod_mapping": {"enabled": "yes"}}, "pod_mapping.enabled: must be true or false"),
        ({"pod_mapping": {"interval": 0}}, "pod_mapping.interval"),
        ({"pod_mapping": {"sockett": "/x"}}, "pod_mapping.sockett: unknown key"),
        ({"pod_mapping": {"resource_prefixes": "nvidia.com/,"}}, None),
    ],
)
def test_bad_pod_mapping_names_the_key(doc: dict, message: str | None) -> None:
    if message is None:
        assert parse(doc).pod_mapping.resource_prefixes == ("nvidia.com/",)
        return
    with pytest.raises(ConfigError, match=message):
        parse(doc)


_leaf = st.none() | st.booleans() | st.integers(-3, 70000) | st.floats(allow_nan=True) | st.text(max_size=12)
_doc = st.recursive(
    _leaf,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "node",
                    "enable",
                    "web",
                    "backends",
                    "listen_address",
                    "telemetry_path",
                    "config_file",
                    "nvml",
                    "interval",
                    "timeout",
                    "stale_after",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=15,
)


@settings(max_examples=200, deadline=None)
@given(_doc)
def test_fuzz_parse_raises_only_config_error(doc: object) -> None:
    try:
        s = parse(doc)
    except ConfigError:
        return
    assert s.web.telemetry_path.startswith("/")
    for b in s.backends.values():
        assert b.interval is None or b.interval > 0
