"""Exporter settings: one YAML file, overridden by XPUWATCH_* environment variables, overridden by flags.

Every setting lands in a frozen dataclass below; a bad value fails at start with a ``ConfigError`` naming
the key (``backends.nvml.interval: must be a number > 0``). Config file shape::

    node: gpu-node-7                  # node label; else $NODE_NAME, else the host name
    enable: [nvml, amd]               # backends to run; absent: detect what this machine has
    web:
      listen_address: ":9851"
      telemetry_path: /metrics
      config_file: /etc/xpuwatch/web.yml   # exporter-toolkit web config (TLS, basic auth)
    backends:                         # per-backend sections, passed to the backend as its options
      nvml: {interval: 5, timeout: 10, stale_after: 30}
      sim: {config: scenario.yaml, seed: 7}
    pod_mapping:                      # pod attribution from the kubelet (exporter.podsource)
      enabled: true
      socket: /var/lib/kubelet/pod-resources/kubelet.sock
      interval: 15                    # seconds between kubelet List calls
      timeout: 5
      grace: 300                      # seconds the last good mapping outlives a kubelet outage
      host_proc: /host/proc           # the host's /proc (pid -> cgroup); default /host/proc if present, else /proc
      resource_prefixes: [nvidia.com/, amd.com/, huawei.com/]   # default: every known vendor
      kube_api: true                  # workload kind/owner from the API server (RBAC: list pods)
      owner_labels: [owner, user]
      label_allowlist: [team]         # pod labels promoted to accelerator_allocated as label_<name>
      annotation_allowlist: []        # pod annotations promoted as annotation_<name>
      owner_kind: false               # the pod's owner kind (Job, ReplicaSet, ...) as owner_kind
    job_mapping:                      # Slurm job attribution (exporter.jobmap); off unless dir is set
      dir: /run/xpuwatch/jobs         # dcgm-exporter's --hpc-job-mapping-dir format (deploy/slurm/)
      interval: 5                     # seconds between reads
      grace: 300                      # seconds the last good mapping outlives a failing read
    metrics:                          # families and breakdowns written (exporter.selection)
      disable_defaults: false         # true: only the included device/slice families and breakdowns
      include: [accelerator_link_errors_total.link]
      exclude: [accelerator_clock_throttled.reason, accelerator_sm_occupancy_ratio]

Environment: XPUWATCH_CONFIG, XPUWATCH_NODE, XPUWATCH_ENABLE (comma-separated), XPUWATCH_WEB_LISTEN_ADDRESS,
XPUWATCH_WEB_TELEMETRY_PATH, XPUWATCH_WEB_CONFIG_FILE, XPUWATCH_DCGM_HOST (``backends.dcgm.host``: per node,
so a DaemonSet can point at ``$(NODE_IP):5555`` from the downward API while the ConfigMap is shared),
XPUWATCH_METRICS_INCLUDE / XPUWATCH_METRICS_EXCLUDE (comma-separated), XPUWATCH_METRICS_DISABLE_DEFAULTS
(true/false), XPUWATCH_JOB_MAPPING_DIR (``job_mapping.dir``, as dcgm-exporter's ``DCGM_HPC_JOB_MAPPING_DIR``).
Metric selection layers per name: the file's include/exclude, then the environment's, then
the ``--collector.<name>`` / ``--no-collector.<name>`` flags (exporter.selection).

Default port 9851: not taken by any exporter in the Prometheus "default port allocations" wiki list (which
runs contiguously from 9100 upwards); 9852/9853 are our relay and remediation controller.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from xpuwatch.exporter import validation
from xpuwatch.exporter.jobmap import JobMappingSettings
from xpuwatch.exporter.podsource import PodMappingSettings
from xpuwatch.exporter.selection import FLAGS, Layer, Selection, SelectionError, resolve
from xpuwatch.exporter.workload import MAX_PROMOTED, check_allowlists

DEFAULT_PORT = 9851
DEFAULT_LISTEN_ADDRESS = f":{DEFAULT_PORT}"
RESERVED_PATHS = ("/healthz", "/readyz", "/")
POLL_KEYS = ("interval", "timeout", "stale_after", "max_output_bytes")
MIN_INTERVAL_SECONDS = 0.5
"""Shortest poll interval accepted: vendor tools take 0.1-2 s per call, and each poll re-renders /metrics."""
MAX_POLL_SECONDS = validation.HOUR
"""Longest poll interval / timeout (backends and pod mapping): data an hour old is no monitoring."""
MAX_STALE_SECONDS = validation.DAY
"""Longest ``stale_after`` and ``pod_mapping.grace``: how long last-good data may be served."""
MAX_OUTPUT_BYTES = validation.GIB
"""Largest ``max_output_bytes``: the cap bounds memory, so "unbounded" is not a value it takes."""


class ConfigError(ValueError):
    """A setting is invalid; the message starts with the key (``web.listen_address: ...``)."""


@dataclass(frozen=True)
class WebSettings:
    """The HTTP endpoint."""

    listen_address: str = DEFAULT_LISTEN_ADDRESS
    """``[host]:port`` to listen on; an empty host means every interface (``:9851``)."""
    telemetry_path: str = "/metrics"
    """Path that serves the metrics."""
    config_file: str | None = None
    """exporter-toolkit web config file (TLS certificate/key, basic-auth users with bcrypt hashes)."""

    @property
    def host_port(self) -> tuple[str, int]:
        return parse_listen_address(self.listen_address, "web.listen_address")


@dataclass(frozen=True)
class BackendSettings:
    """How one backend is polled, plus its own options."""

    interval: float | None = None
    """Seconds between polls; None = the backend's registered default."""
    timeout: float | None = None
    """Seconds a poll may take before it counts as failed; None = 2 * interval."""
    stale_after: float | None = None
    """Seconds the last good data is served; None = 2 * interval + timeout."""
    max_output_bytes: int | None = None
    """Bytes a vendor tool may print per call (stdout + stderr); over it the poll fails with reason
    ``output_too_large``. None = ``vendors.command.DEFAULT_MAX_OUTPUT_BYTES`` (16 MiB)."""
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """The rest of the backend's section, passed to it as ``BackendContext.options``."""


@dataclass(frozen=True)
class Settings:
    """Everything ``xpuwatch serve`` needs."""

    node: str | None = None
    """Node label on every series; None = $NODE_NAME, else the host name (sim: the scenario's node)."""
    enable: tuple[str, ...] = ()
    """Backends to run by name; empty = detect the ones present."""
    web: WebSettings = field(default_factory=WebSettings)
    """The HTTP endpoint."""
    backends: Mapping[str, BackendSettings] = field(default_factory=lambda: MappingProxyType({}))
    """Per-backend sections by backend name."""
    pod_mapping: PodMappingSettings = field(default_factory=PodMappingSettings)
    """Pod attribution through the kubelet PodResources API (off unless enabled)."""
    metrics: Selection = field(default_factory=Selection.default)
    """The families and breakdowns written (exporter.selection); default: every family, each breakdown
    at its catalog default."""
    metrics_layer: Layer = field(default_factory=Layer)
    """What the config file's ``metrics`` section says (the lowest layer of ``metrics``)."""
    enable_from: str = "enable"
    """Where ``enable`` was set (``--backend``, ``XPUWATCH_ENABLE`` or the config's ``enable``), for errors."""
    job_mapping: JobMappingSettings = field(default_factory=JobMappingSettings)
    """Slurm job attribution from a job mapping directory (off unless its dir is set)."""

    def backend(self, name: str) -> BackendSettings:
        return self.backends.get(name, BackendSettings())


def parse_listen_address(value: str, key: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``host:port`` / ``:port`` / ``[v6]:port`` -> (host, port); host "" = all interfaces."""
    m = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^:\[\]]*):(\d{1,5})", value or "")
    if not m or not 0 <= int(m.group(2)) <= 65535:
        raise ConfigError(f"{key}: {value!r} is not [host]:port (e.g. ':{default_port}' or '127.0.0.1:0')")
    return m.group(1).strip("[]"), int(m.group(2))


def _positive(v: Any, key: str, high: float = MAX_POLL_SECONDS) -> float:
    return validation.number(v, key, low=0, high=high, low_open=True, unit="seconds", error=ConfigError)


def _str(v: Any, key: str) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError(f"{key}: must be a non-empty string, got {v!r}")
    return v


def _mapping(v: Any, key: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ConfigError(f"{key}: must be a mapping, got {type(v).__name__}")
    return v


def _names(v: Any, key: str) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [s.strip() for s in v.split(",") if s.strip()]
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
        raise ConfigError(f"{key}: must be a list of names")
    return tuple(dict.fromkeys(v))


def _web(raw: Mapping[str, Any]) -> WebSettings:
    unknown = set(raw) - {"listen_address", "telemetry_path", "config_file"}
    if unknown:
        raise ConfigError(
            f"web.{sorted(unknown)[0]}: unknown key (known: listen_address, telemetry_path, config_file)"
        )
    web = WebSettings(
        listen_address=_str(raw.get("listen_address", DEFAULT_LISTEN_ADDRESS), "web.listen_address"),
        telemetry_path=_str(raw.get("telemetry_path", "/metrics"), "web.telemetry_path"),
        config_file=None if raw.get("config_file") is None else _str(raw["config_file"], "web.config_file"),
    )
    check_web(web)
    return web


def check_web(web: WebSettings) -> None:
    """Validate web settings (also after flags/env overrides)."""
    web.host_port  # noqa: B018 - validates
    p = web.telemetry_path
    if not p.startswith("/") or p in RESERVED_PATHS or any(c.isspace() for c in p):
        raise ConfigError(
            f"web.telemetry_path: {p!r} must start with / and not be one of {', '.join(RESERVED_PATHS)}"
        )


def _backend(name: str, raw: Any) -> BackendSettings:
    key = f"backends.{name}"
    section = _mapping(raw, key)
    interval = None if section.get("interval") is None else _positive(section["interval"], f"{key}.interval")
    if interval is not None and interval < MIN_INTERVAL_SECONDS:
        raise ConfigError(
            f"{key}.interval: must be at least {MIN_INTERVAL_SECONDS} seconds, got {interval:g}"
        )
    cap = section.get("max_output_bytes")
    if cap is not None:
        validation.number(
            cap,
            f"{key}.max_output_bytes",
            low=1024,
            high=MAX_OUTPUT_BYTES,
            integer=True,
            unit="bytes",
            error=ConfigError,
        )
    timeout = None if section.get("timeout") is None else _positive(section["timeout"], f"{key}.timeout")
    stale = (
        None
        if section.get("stale_after") is None
        else _positive(section["stale_after"], f"{key}.stale_after", MAX_STALE_SECONDS)
    )
    options = {k: v for k, v in section.items() if k not in POLL_KEYS}
    return BackendSettings(interval, timeout, stale, cap, MappingProxyType(options))


_POD_KEYS = {
    "enabled",
    "socket",
    "interval",
    "timeout",
    "max_backoff",
    "grace",
    "host_proc",
    "resource_prefixes",
    "kube_api",
    "kube_api_host",
    "owner_labels",
    "label_allowlist",
    "annotation_allowlist",
    "owner_kind",
}


def _pod_mapping(raw: Any) -> PodMappingSettings:
    section = _mapping(raw, "pod_mapping")
    unknown = set(section) - _POD_KEYS
    if unknown:
        raise ConfigError(
            f"pod_mapping.{sorted(map(str, unknown))[0]}: unknown key (known: {', '.join(sorted(_POD_KEYS))})"
        )
    d = PodMappingSettings()
    for key in ("enabled", "kube_api", "owner_kind"):
        if key in section and not isinstance(section[key], bool):
            raise ConfigError(f"pod_mapping.{key}: must be true or false")

    def num(key: str, default: float) -> float:
        return default if section.get(key) is None else _positive(section[key], f"pod_mapping.{key}")

    allow = {
        key: () if section.get(key) is None else _names(section[key], f"pod_mapping.{key}")
        for key in ("label_allowlist", "annotation_allowlist", "owner_labels")
    }
    owner_kind = section.get("owner_kind", d.owner_kind)
    problem = check_allowlists(allow["label_allowlist"], allow["annotation_allowlist"], owner_kind)
    if problem:
        raise ConfigError(f"pod_mapping.label_allowlist/annotation_allowlist: {problem}")
    promoting = allow["label_allowlist"] or allow["annotation_allowlist"] or owner_kind
    if promoting and not section.get("kube_api", d.kube_api):
        raise ConfigError(
            "pod_mapping.label_allowlist/annotation_allowlist/owner_kind: need kube_api: true (pod "
            "labels, annotations and owners are read from the API server)"
        )
    if len(allow["owner_labels"]) > MAX_PROMOTED:
        raise ConfigError(
            f"pod_mapping.owner_labels: at most {MAX_PROMOTED} keys, got {len(allow['owner_labels'])}"
        )
    return PodMappingSettings(
        enabled=section.get("enabled", d.enabled),
        socket=_str(section.get("socket", d.socket), "pod_mapping.socket"),
        interval_seconds=num("interval", d.interval_seconds),
        timeout_seconds=num("timeout", d.timeout_seconds),
        max_backoff_seconds=num("max_backoff", d.max_backoff_seconds),
        grace_seconds=(  # 0: drop pod labels at the first failed refresh
            d.grace_seconds
            if section.get("grace") is None
            else 0.0
            if section["grace"] == 0 and not isinstance(section["grace"], bool)
            else _positive(section["grace"], "pod_mapping.grace", MAX_STALE_SECONDS)
        ),
        host_proc=None
        if section.get("host_proc") is None
        else _str(section["host_proc"], "pod_mapping.host_proc"),
        resource_prefixes=(
            d.resource_prefixes
            if section.get("resource_prefixes") is None
            else _names(section["resource_prefixes"], "pod_mapping.resource_prefixes")
        ),
        kube_api=section.get("kube_api", d.kube_api),
        kube_api_host=None
        if section.get("kube_api_host") is None
        else _str(section["kube_api_host"], "pod_mapping.kube_api_host"),
        owner_labels=(
            d.owner_labels
            if section.get("owner_labels") is None
            else _names(section["owner_labels"], "pod_mapping.owner_labels")
        ),
        label_allowlist=allow["label_allowlist"],
        annotation_allowlist=allow["annotation_allowlist"],
        owner_kind=owner_kind,
    )


_JOB_KEYS = ("dir", "interval", "grace")


def _job_mapping(raw: Any) -> JobMappingSettings:
    section = _mapping(raw, "job_mapping")
    unknown = set(section) - set(_JOB_KEYS)
    if unknown:
        raise ConfigError(
            f"job_mapping.{sorted(map(str, unknown))[0]}: unknown key (known: {', '.join(_JOB_KEYS)})"
        )
    d = JobMappingSettings()
    grace = section.get("grace")
    return JobMappingSettings(
        dir=None if section.get("dir") is None else _str(section["dir"], "job_mapping.dir"),
        interval_seconds=d.interval_seconds
        if section.get("interval") is None
        else _positive(section["interval"], "job_mapping.interval", MAX_POLL_SECONDS),
        grace_seconds=d.grace_seconds
        if grace is None
        else 0.0
        if grace == 0 and not isinstance(grace, bool)
        else _positive(grace, "job_mapping.grace", MAX_STALE_SECONDS),
    )


_METRICS_KEYS = ("disable_defaults", "include", "exclude")


def _metrics_layer(raw: Any) -> Layer:
    section = _mapping(raw, "metrics")
    unknown = set(section) - set(_METRICS_KEYS)
    if unknown:
        raise ConfigError(
            f"metrics.{sorted(map(str, unknown))[0]}: unknown key (known: {', '.join(_METRICS_KEYS)})"
        )
    disable = section.get("disable_defaults")
    if disable is not None and not isinstance(disable, bool):
        raise ConfigError("metrics.disable_defaults: must be true or false")
    return Layer(
        () if section.get("include") is None else _names(section["include"], "metrics.include"),
        () if section.get("exclude") is None else _names(section["exclude"], "metrics.exclude"),
        disable,
    )


def _env_layer(env: Mapping[str, str]) -> Layer:
    disable: bool | None = None
    raw = env.get("XPUWATCH_METRICS_DISABLE_DEFAULTS", "").strip().lower()
    if raw:
        if raw not in ("true", "false"):
            raise ConfigError(f"XPUWATCH_METRICS_DISABLE_DEFAULTS: must be true or false, got {raw!r}")
        disable = raw == "true"
    include = env.get("XPUWATCH_METRICS_INCLUDE", "")
    exclude = env.get("XPUWATCH_METRICS_EXCLUDE", "")
    return Layer(
        _names(include, "XPUWATCH_METRICS_INCLUDE") if include.strip() else (),
        _names(exclude, "XPUWATCH_METRICS_EXCLUDE") if exclude.strip() else (),
        disable,
    )


def select(layers: list[tuple[str, Layer]]) -> Selection:
    """``exporter.selection.resolve`` with its errors as ConfigError."""
    try:
        return resolve(layers)
    except SelectionError as exc:
        raise ConfigError(str(exc)) from exc


_TOP_KEYS = ("node", "enable", "web", "backends", "pod_mapping", "job_mapping", "metrics")


def parse(doc: Any, source: str = "config") -> Settings:
    """Build Settings from a parsed YAML document (pure). Raises ConfigError naming the key."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: must be a mapping of keys ({', '.join(_TOP_KEYS)})")
    unknown = set(doc) - set(_TOP_KEYS)
    if unknown:
        raise ConfigError(f"{sorted(map(str, unknown))[0]}: unknown key (known: {', '.join(_TOP_KEYS)})")
    node = None if doc.get("node") is None else _str(doc["node"], "node")
    enable = () if doc.get("enable") is None else _names(doc["enable"], "enable")
    web = _web(_mapping(doc.get("web"), "web"))
    backends = {
        str(name): _backend(str(name), section)
        for name, section in _mapping(doc.get("backends"), "backends").items()
    }
    layer = _metrics_layer(doc.get("metrics"))
    return Settings(
        node,
        enable,
        web,
        MappingProxyType(backends),
        _pod_mapping(doc.get("pod_mapping")),
        select([("metrics", layer)]),
        layer,
        job_mapping=_job_mapping(doc.get("job_mapping")),
    )


def load(path: str | None, env: Mapping[str, str], flags: Mapping[str, Any]) -> Settings:
    """File (``path`` or $XPUWATCH_CONFIG), then environment, then flags (non-None values win).

    ``flags`` keys: node, enable (list), listen_address, telemetry_path, web_config_file, job_mapping_dir,
    metrics (the ``--collector.*`` flags' ``Layer``).
    """
    path = path or env.get("XPUWATCH_CONFIG") or None
    doc: Any = {}
    if path:
        doc = validation.yaml_file(path, "--config", ConfigError)
    s = parse(doc, source=str(path or "config"))

    def pick(flag: str, env_key: str, current: Any) -> Any:
        if flags.get(flag) not in (None, [], ()):
            return flags[flag]
        if env.get(env_key):
            return env[env_key]
        return current

    node = pick("node", "XPUWATCH_NODE", s.node)
    enable = pick("enable", "XPUWATCH_ENABLE", s.enable)
    enable_from = (
        "--backend"
        if flags.get("enable") not in (None, [], ())
        else "XPUWATCH_ENABLE"
        if env.get("XPUWATCH_ENABLE")
        else "enable"
    )
    web = WebSettings(
        listen_address=pick("listen_address", "XPUWATCH_WEB_LISTEN_ADDRESS", s.web.listen_address),
        telemetry_path=pick("telemetry_path", "XPUWATCH_WEB_TELEMETRY_PATH", s.web.telemetry_path),
        config_file=pick("web_config_file", "XPUWATCH_WEB_CONFIG_FILE", s.web.config_file),
    )
    check_web(web)
    backends = s.backends
    if env.get("XPUWATCH_DCGM_HOST"):
        dcgm = s.backend("dcgm")
        options = {**dcgm.options, "host": env["XPUWATCH_DCGM_HOST"]}
        backends = MappingProxyType(
            {**backends, "dcgm": dataclasses.replace(dcgm, options=MappingProxyType(options))}
        )
    job_dir = pick("job_mapping_dir", "XPUWATCH_JOB_MAPPING_DIR", s.job_mapping.dir)
    return Settings(
        node=node,
        enable=_names(list(enable) if not isinstance(enable, str) else enable, enable_from),
        enable_from=enable_from,
        web=web,
        backends=backends,
        pod_mapping=s.pod_mapping,
        job_mapping=dataclasses.replace(s.job_mapping, dir=job_dir or None),
        metrics=select(
            [
                ("metrics", s.metrics_layer),
                ("XPUWATCH_METRICS", _env_layer(env)),
                (FLAGS, flags.get("metrics") or Layer()),
            ]
        ),
        metrics_layer=s.metrics_layer,
    )


# ---------------------------------------------------------------------------------------------------------
# exporter-toolkit web config (https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md)

_BCRYPT = re.compile(r"^\$2[aby]?\$\d\d\$[./A-Za-z0-9]{53}$")
_CLIENT_AUTH = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)
_TLS_VERSIONS = ("TLS10", "TLS11", "TLS12", "TLS13")


@dataclass(frozen=True)
class TLSSettings:
    """``tls_server_config``: server certificate and key (PEM files), optional client verification."""

    cert_file: str
    key_file: str
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    min_version: str = "TLS12"


@dataclass(frozen=True)
class WebConfig:
    """A parsed exporter-toolkit web config. ``basic_auth_users``: user -> bcrypt hash; ``headers``:
    ``http_server_config.headers`` added to every response."""

    tls: TLSSettings | None = None
    basic_auth_users: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


# exporter-toolkit's http_server_config.headers allows only these (docs/web-configuration.md).
_HEADERS = (
    "Content-Security-Policy",
    "Strict-Transport-Security",
    "X-Content-Type-Options",
    "X-Frame-Options",
    "X-XSS-Protection",
)


def _http_server_config(raw: Any) -> Mapping[str, str]:
    """``http_server_config``: ``http2`` (accepted; aiohttp serves HTTP/1.1 only) and ``headers``."""
    section = _mapping(raw, "http_server_config")
    unknown = set(section) - {"http2", "headers"}
    if unknown:
        raise ConfigError(
            f"http_server_config.{sorted(map(str, unknown))[0]}: unknown key (known: http2, headers)"
        )
    if "http2" in section and not isinstance(section["http2"], bool):
        raise ConfigError("http_server_config.http2: must be true or false")
    headers = _mapping(section.get("headers"), "http_server_config.headers")
    allowed = {h.lower(): h for h in _HEADERS}
    out = {}
    for name, value in headers.items():
        where = f"http_server_config.headers.{name!s}"
        validation.header_name(name, "http_server_config.headers", ConfigError)
        if str(name).lower() not in allowed:
            raise ConfigError(f"{where}: not one of {', '.join(_HEADERS)}")
        out[allowed[str(name).lower()]] = validation.header_value(value, where, ConfigError)
    return MappingProxyType(out)


def load_web_config(path: str) -> WebConfig:
    """Read and validate an exporter-toolkit web config file. Raises ConfigError naming the key."""
    doc = validation.yaml_file(path, "web.config_file", ConfigError)
    return parse_web_config(doc, base=Path(path).parent)


def parse_web_config(doc: Any, base: Path = Path(".")) -> WebConfig:
    """Validate a web config document; relative file paths resolve against ``base`` (the file's dir)."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError("web.config_file: must be a mapping (tls_server_config, basic_auth_users)")
    unknown = set(doc) - {"tls_server_config", "basic_auth_users", "http_server_config"}
    if unknown:
        raise ConfigError(f"{sorted(map(str, unknown))[0]}: unknown web config key")
    tls = None
    if doc.get("tls_server_config") is not None:
        t = _mapping(doc["tls_server_config"], "tls_server_config")
        known = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version"}
        if set(t) - known:
            raise ConfigError(f"tls_server_config.{sorted(set(t) - known)[0]}: not supported")
        for k in ("cert_file", "key_file"):
            if not t.get(k):
                raise ConfigError(f"tls_server_config.{k}: required when tls_server_config is set")
            p = base / str(t[k])
            if not p.is_file():
                raise ConfigError(f"tls_server_config.{k}: {p} does not exist")
        cat = t.get("client_auth_type", "NoClientCert")
        if cat not in _CLIENT_AUTH:
            raise ConfigError(
                f"tls_server_config.client_auth_type: {cat!r} is not one of {', '.join(_CLIENT_AUTH)}"
            )
        ca = t.get("client_ca_file")
        if cat != "NoClientCert" and not ca:
            raise ConfigError(f"tls_server_config.client_ca_file: required with client_auth_type {cat}")
        if ca and not (base / str(ca)).is_file():
            raise ConfigError(f"tls_server_config.client_ca_file: {base / str(ca)} does not exist")
        mv = t.get("min_version", "TLS12")
        if mv not in _TLS_VERSIONS:
            raise ConfigError(
                f"tls_server_config.min_version: {mv!r} is not one of {', '.join(_TLS_VERSIONS)}"
            )
        tls = TLSSettings(
            str(base / str(t["cert_file"])),
            str(base / str(t["key_file"])),
            cat,
            str(base / str(ca)) if ca else None,
            mv,
        )
    users = _mapping(doc.get("basic_auth_users"), "basic_auth_users")
    for user, h in users.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise ConfigError(f"basic_auth_users: {user!r} is not a valid user name")
        if not isinstance(h, str) or not _BCRYPT.match(h):
            raise ConfigError(
                f"basic_auth_users.{user}: must be a bcrypt hash ($2y$10$...), not a plain password"
            )
    return WebConfig(
        tls,
        MappingProxyType({str(k): str(v) for k, v in users.items()}),
        _http_server_config(doc.get("http_server_config")),
    )
