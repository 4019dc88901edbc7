"""Remediation settings: the YAML config file parsed once at the edge into frozen dataclasses.

Every field has a default that is safe on a real cluster: dry-run on, one node disrupted at a time,
resize in ``recommend`` mode, ``kube-system`` protected. ``load`` raises ``ConfigError`` with the path of
the offending key; nothing downstream re-validates.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from xpuwatch.alerts.spec import CATEGORIES
from xpuwatch.exporter import validation

ActionName = Literal["reclaim", "resize", "drain"]
ACTIONS: tuple[ActionName, ...] = ("reclaim", "resize", "drain")
EvictionMode = Literal["immediate", "after-notice", "wait-for-completion"]
EVICTION_MODES: tuple[EvictionMode, ...] = ("immediate", "after-notice", "wait-for-completion")


class ConfigError(ValueError):
    """The config file is unreadable or a key has a wrong type or value; the message names the key."""


# Upper bound of a numeric setting: by field name, else by suffix, else MAX_NUMBER. A value past one would
# overflow a timer (``asyncio.sleep(1e308)``) or switch a limit off (a body cap of 1e20 bytes).
_BOUND_BY_NAME: dict[str, tuple[float, str]] = {
    "max_disrupted_nodes": (100_000, "nodes"),
    "hub_timeout_seconds": (5 * validation.MINUTE, "seconds"),
    "lease_duration_seconds": (validation.HOUR, "seconds"),
    "renew_deadline_seconds": (validation.HOUR, "seconds"),
    "retry_period_seconds": (validation.HOUR, "seconds"),
}
_BOUND_BY_SUFFIX: tuple[tuple[str, float, str], ...] = (
    ("_bytes", 64 * validation.MIB, "bytes"),
    ("_seconds", validation.MAX_DURATION_SECONDS, "seconds"),
)
_POSITIVE = frozenset(
    {
        "expire_seconds",  # 0: a pending decision expires at once, so nothing can ever be approved
        "hub_timeout_seconds",  # 0: every JupyterHub call times out, so no notebook is ever reclaimed
        "state_timeout_seconds",  # 0: every MIG change times out at once
        "max_body_bytes",  # 0: every webhook is 413
        "lease_duration_seconds",  # 0: leadership lapses as it is won
        "renew_deadline_seconds",
        "retry_period_seconds",  # 0: the elector spins
    }
)
"""Numeric settings that must be more than 0: at 0 the feature they time or bound silently stops working."""
MAX_TICK_SECONDS = validation.HOUR
_URL_KEYS = {"hub_api_url", "kernels_url", "prometheus_url", "host"}  # http(s) URLs inside sections


def _bound(name: str) -> tuple[float, str]:
    if name in _BOUND_BY_NAME:
        return _BOUND_BY_NAME[name]
    for suffix, high, unit in _BOUND_BY_SUFFIX:
        if name.endswith(suffix):
            return high, unit
    return validation.MAX_NUMBER, ""


def _bounded(value: Any, key: str, name: str) -> None:
    high, unit = _bound(name)
    validation.number(value, key, low=0, high=high, unit=unit, error=ConfigError)


@dataclass(frozen=True)
class Rule:
    """One policy rule: alerts whose ``action`` label equals ``action`` (and, when ``alertnames`` is not
    empty, whose alertname is listed) are handled by that action with ``params``."""

    action: ActionName
    alertnames: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WebhookSettings:
    """The receiver's HTTP side. Credentials come from files or environment variables, never inline
    YAML; ``load`` refuses a config without any unless ``allow_unauthenticated`` is true."""

    listen_host: str = "0.0.0.0"
    listen_port: int = 9853  # contract: remediation controller default port
    bearer_token: str | None = None
    basic_user: str | None = None
    basic_password: str | None = None  # plain, compared in constant time (as the relay does)
    basic_password_hash: bytes | None = None  # or a bcrypt hash
    allow_unauthenticated: bool = False  # the config loader refuses no-auth unless this is true
    max_body_bytes: int = 1 << 20  # Alertmanager groups of a few hundred alerts stay well under 1 MiB


@dataclass(frozen=True)
class GuardSettings:
    """What the guard refuses. Caps follow NHC ``maxUnhealthy`` / NVSentinel's circuit breaker: the lower
    of ``max_disrupted_nodes`` and ``floor(max_disrupted_ratio * fleet)`` nodes may be disrupted at once."""

    dry_run: bool = True
    max_disrupted_nodes: int = 1
    max_disrupted_ratio: float = 0.1
    cooldown_seconds: float = 3600.0  # per target, after an action finished or was started
    protected_namespaces: tuple[str, ...] = ("kube-system", "kube-public", "kube-node-lease", "gpu-operator")
    max_view_age_seconds: float = 300.0  # fleet view older than this = stale data, no disruptive action
    max_clock_skew_seconds: float = 300.0  # an alert starting further in the future is bogus
    # A node tainted or cordoned by xpuwatch for longer than this is paged to a human, naming the node
    # (notice + Event + the XpuwatchRemediationNodeHeldTooLong alert); never lifted on a guess.
    max_hold_seconds: float = 86400.0


@dataclass(frozen=True)
class ReclaimSettings:
    """Idle-notebook reclaim. ``idle_seconds``: no notebook activity for this long counts as idle (the
    GPU side is the alert itself). ``grace_seconds``: notice-to-stop delay."""

    idle_seconds: float = 3600.0
    grace_seconds: float = 1800.0
    hub_api_url: str | None = None  # e.g. http://hub:8081/hub/api
    hub_token: str | None = None  # scopes: list:users read:users:activity read:servers delete:servers
    hub_timeout_seconds: float = 10.0
    # Kubeflow activity probe (notebook-controller culler): {namespace} {name} are filled in.
    kernels_url: str = "http://{name}.{namespace}.svc.cluster.local/notebook/{namespace}/{name}/api/kernels"


@dataclass(frozen=True)
class ResizeSettings:
    """Slice resize. ``mode``: ``recommend`` (Event + annotation + message) or ``apply`` (only if a rule's
    params also say ``mode: apply``). ``config_name``: mig-parted config name for a target profile."""

    mode: Literal["recommend", "apply"] = "recommend"
    config_name: str = "all-{profile}"  # mig-parted config-default.yaml names, e.g. all-1g.20gb
    state_timeout_seconds: float = 900.0
    # None = each pod's own terminationGracePeriodSeconds (a value here overrides it, longer or shorter)
    eviction_grace_seconds: int | None = None


@dataclass(frozen=True)
class DrainSettings:
    """Faulty-card drain. Namespace modes override ``default_mode``; ``notice_seconds`` is the
    after-notice delay; ``completion_timeout_seconds`` bounds wait-for-completion (then evict)."""

    default_mode: EvictionMode = "after-notice"
    namespace_modes: Mapping[str, EvictionMode] = field(default_factory=dict)
    notice_seconds: float = 600.0
    completion_timeout_seconds: float = 86400.0
    healthy_for_seconds: float = 3600.0
    # Prometheus holding the exporter's accelerator_allocated series: finds the holders of a shared
    # device, whose alerts carry no pod labels. None = holders from the alert's labels only.
    prometheus_url: str | None = None
    # None = each pod's own terminationGracePeriodSeconds (a value here overrides it, longer or shorter)
    eviction_grace_seconds: int | None = None


ApprovalMode = Literal["auto", "manual"]
APPROVAL_MODES: tuple[ApprovalMode, ...] = ("auto", "manual")


@dataclass(frozen=True)
class ApprovalSettings:
    """``default``/``actions``/``namespaces``: auto or manual; ``expire_seconds``: a pending decision not
    approved or denied within this is dropped (audited and announced; a new alert episode asks again)."""

    default: ApprovalMode = "auto"
    actions: Mapping[str, ApprovalMode] = field(default_factory=dict)
    namespaces: Mapping[str, ApprovalMode] = field(default_factory=dict)
    expire_seconds: float = 3600.0


@dataclass(frozen=True)
class RecheckSettings:
    """Re-check before acting (``remediation/recheck.py``): right before each disruptive step the
    controller asks ``prometheus_url`` whether the alert still fires in ``ALERTS``; cleared = the step is
    cancelled, unreachable or unreadable = it does not run. None = no re-check (the step runs on the alert as received)."""

    prometheus_url: str | None = None
    timeout_seconds: float = 10.0


@dataclass(frozen=True)
class LeaderSettings:
    """Leader election on a coordination.k8s.io/v1 Lease (client-go defaults 15 s / 10 s / 2 s)."""

    lease_name: str = "xpuwatch-remediation"
    lease_namespace: str = "xpuwatch"
    identity: str = field(default_factory=lambda: os.environ.get("POD_NAME") or socket.gethostname())
    lease_duration_seconds: int = 15
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0


@dataclass(frozen=True)
class KubeSettings:
    """How to reach the API server: ``host`` (tests, ``kubectl proxy``), else in-cluster, else kubeconfig."""

    host: str | None = None
    kubeconfig: str | None = None
    component: str = "xpuwatch-remediation"


@dataclass(frozen=True)
class Settings:
    """The whole controller config. ``tick_seconds``: period of the resume/follow loop."""

    rules: tuple[Rule, ...] = ()
    webhook: WebhookSettings = field(default_factory=WebhookSettings)
    guard: GuardSettings = field(default_factory=GuardSettings)
    reclaim: ReclaimSettings = field(default_factory=ReclaimSettings)
    resize: ResizeSettings = field(default_factory=ResizeSettings)
    drain: DrainSettings = field(default_factory=DrainSettings)
    recheck: RecheckSettings = field(default_factory=RecheckSettings)
    approval: ApprovalSettings = field(default_factory=ApprovalSettings)
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    kube: KubeSettings = field(default_factory=KubeSettings)
    audit_path: str | None = None  # JSON lines; None = stdout
    tick_seconds: float = 10.0
    # Relay channel for notices and recommendations (contract: http://<relay>:9852/alertmanager/<channel>):
    # ``notify`` maps an alert category (hardware, performance) to the channel of that category's people;
    # ``notify_url`` takes the categories ``notify`` does not name (and every notice in configs before it).
    notify_url: str | None = None
    notify: Mapping[str, str] = field(default_factory=dict)
    notify_token: str | None = None  # bearer token the relay requires (``notify_token_file``)

    def notify_url_for(self, category: str) -> str | None:
        """The relay URL for a notice of ``category`` (hardware, performance): ``notify[category]``, else
        ``notify_url``; None = notices of that category are not sent."""
        return self.notify.get(category, self.notify_url)


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_NAMESPACE = 63


def namespace(value: Any, key: str) -> str:
    """``value`` if it can name a Kubernetes namespace (an RFC 1123 label: at most 63 lowercase letters,
    digits and ``-``, starting and ending with a letter or digit: apimachinery ``IsDNS1123Label``), else
    ConfigError: a key that no namespace can match (``Training``, ``ml_team``) would silently never apply,
    leaving that namespace to the default."""
    if not isinstance(value, str) or len(value) > MAX_NAMESPACE or not _NAMESPACE.fullmatch(value):
        raise ConfigError(
            f"{key}: {value!r} is not a namespace name (at most 63 lowercase letters, digits and '-', "
            "starting and ending with a letter or digit)"
        )
    return value


def _read_secret(base: Path, value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}: expected a file path")
    path = (base / value) if not os.path.isabs(value) else Path(value)
    # an empty token file is refused: it would silently mean "no credentials"
    return validation.secret_text(path, key, ConfigError)


def _secret(doc: dict[str, Any], name: str, base: Path, where: str) -> str | None:
    """``<name>_file`` (path, relative to the config file) or ``<name>_env`` (variable name); popped."""
    if f"{name}_file" in doc:
        return _read_secret(base, doc.pop(f"{name}_file"), f"{where}.{name}_file")
    if f"{name}_env" in doc:
        var = doc.pop(f"{name}_env")
        value = os.environ.get(var) if isinstance(var, str) else None
        if not value:
            raise ConfigError(f"{where}.{name}_env: environment variable {var!r} is unset or empty")
        return value.strip()
    return None


def _section(cls: type, raw: Any, key: str, overrides: Mapping[str, Any] | None = None) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{key}: expected a mapping")
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = dict(overrides or {})
    for name, value in raw.items():
        if name in kwargs:
            continue
        if name not in known:
            raise ConfigError(f"{key}.{name}: unknown key")
        default = getattr(cls(), name)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"{key}.{name}: expected true/false, got {value!r}")
        elif isinstance(default, int | float) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"{key}.{name}: expected a non-negative number")
            _bounded(value, f"{key}.{name}", name)
            if name in _POSITIVE and value == 0:
                raise ConfigError(f"{key}.{name}: expected more than 0")
            value = type(default)(value)
        elif isinstance(default, tuple):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{key}.{name}: expected a list of strings")
            if name.endswith("namespaces"):
                for ns in value:
                    namespace(ns, f"{key}.{name}")
            value = tuple(value)
        elif default is None and name.endswith("_seconds"):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{key}.{name}: expected a non-negative integer")
            _bounded(value, f"{key}.{name}", name)
        elif (default is None or isinstance(default, str)) and not isinstance(value, str):
            raise ConfigError(f"{key}.{name}: expected a string")
        if name in _URL_KEYS and value is not None:
            validation.http_url(value, f"{key}.{name}", ConfigError)
        kwargs[name] = value
    return cls(**kwargs)


def parse(raw: Any, base: Path = Path(".")) -> Settings:
    """Build ``Settings`` from a parsed YAML mapping; relative secret paths resolve against ``base``."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError("top level: expected a mapping")
    unknown = set(raw) - {
        "rules",
        "webhook",
        "guard",
        "reclaim",
        "resize",
        "drain",
        "recheck",
        "approval",
        "leader",
        "kube",
        "audit_path",
        "tick_seconds",
        "notify_url",
        "notify",
        "notify_token_file",
    }
    if unknown:
        raise ConfigError(f"{sorted(unknown)[0]}: unknown key")

    rules = []
    raw_rules = raw.get("rules") or []
    if not isinstance(raw_rules, list):
        raise ConfigError("rules: expected a list")
    for i, r in enumerate(raw_rules):
        if not isinstance(r, Mapping) or r.get("action") not in ACTIONS:
            raise ConfigError(f"rules[{i}].action: expected one of {', '.join(ACTIONS)}")
        names = r.get("alertnames") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"rules[{i}].alertnames: expected a list of strings")
        params = r.get("params") or {}
        if not isinstance(params, Mapping):
            raise ConfigError(f"rules[{i}].params: expected a mapping")
        rules.append(Rule(action=r["action"], alertnames=tuple(names), params=dict(params)))

    wh = dict(raw.get("webhook") or {})
    wh_over: dict[str, Any] = {}
    for secret in ("bearer_token", "basic_password_hash", "basic_user", "basic_password"):
        if secret in wh:
            raise ConfigError(
                f"webhook.{secret}: use bearer_token_file/_env or basic_auth (secrets are not inlined)"
            )
    token = _secret(wh, "bearer_token", base, "webhook")
    if token is not None:
        wh_over["bearer_token"] = token
    basic = wh.pop("basic_auth", None)
    if basic is not None:
        if (
            not isinstance(basic, Mapping)
            or not isinstance(basic.get("username"), str)
            or not basic["username"]
        ):
            raise ConfigError("webhook.basic_auth.username: required")
        basic = dict(basic)
        unknown = set(basic) - {"username", "password_file", "password_env", "password_hash_file"}
        if unknown:
            raise ConfigError(f"webhook.basic_auth.{sorted(unknown)[0]}: unknown key")
        wh_over["basic_user"] = basic.pop("username")
        if "password_hash_file" in basic:
            wh_over["basic_password_hash"] = _read_secret(
                base, basic.pop("password_hash_file"), "webhook.basic_auth.password_hash_file"
            ).encode()
        else:
            wh_over["basic_password"] = _secret(basic, "password", base, "webhook.basic_auth")
        if wh_over.get("basic_password_hash") is None and wh_over.get("basic_password") is None:
            raise ConfigError(
                "webhook.basic_auth: password_file, password_env or password_hash_file required"
            )
    if (
        "bearer_token" not in wh_over
        and "basic_user" not in wh_over
        and wh.get("allow_unauthenticated") is not True
    ):
        raise ConfigError(
            "webhook: set bearer_token_file/_env or basic_auth (or allow_unauthenticated: true, for local tests)"
        )
    webhook = _section(WebhookSettings, wh, "webhook", wh_over)
    if not 0 <= webhook.listen_port <= 65535:
        raise ConfigError(f"webhook.listen_port: {webhook.listen_port} is not a port (0-65535)")

    rc = dict(raw.get("reclaim") or {})
    rc_over: dict[str, Any] = {}
    if "hub_token_file" in rc:
        rc_over["hub_token"] = _read_secret(base, rc.pop("hub_token_file"), "reclaim.hub_token_file")
    if "hub_token" in rc:
        raise ConfigError("reclaim.hub_token: give hub_token_file, secrets are not inlined")
    for k in ("hub_api_url",):
        if k in rc:
            rc_over[k] = validation.http_url(rc.pop(k), f"reclaim.{k}", ConfigError)
    reclaim = _section(ReclaimSettings, rc, "reclaim", rc_over)

    rs = dict(raw.get("resize") or {})
    if rs.get("mode", "recommend") not in ("recommend", "apply"):
        raise ConfigError("resize.mode: expected recommend or apply")
    resize = _section(ResizeSettings, rs, "resize")

    dr = dict(raw.get("drain") or {})
    if dr.get("default_mode", "after-notice") not in EVICTION_MODES:
        raise ConfigError(f"drain.default_mode: expected one of {', '.join(EVICTION_MODES)}")
    modes = dr.pop("namespace_modes", None) or {}
    if not isinstance(modes, Mapping) or any(m not in EVICTION_MODES for m in modes.values()):
        raise ConfigError(f"drain.namespace_modes: values must be one of {', '.join(EVICTION_MODES)}")
    for ns in modes:
        namespace(ns, f"drain.namespace_modes.{ns}")
    drain = _section(DrainSettings, dr, "drain", {"namespace_modes": dict(modes)})

    guard = _section(GuardSettings, raw.get("guard"), "guard")
    if not 0.0 <= guard.max_disrupted_ratio <= 1.0:
        raise ConfigError("guard.max_disrupted_ratio: expected 0..1")
    recheck = _section(RecheckSettings, raw.get("recheck"), "recheck")
    if recheck.timeout_seconds <= 0 or recheck.timeout_seconds > 300:
        raise ConfigError("recheck.timeout_seconds: expected more than 0 and at most 300 seconds")
    approval = _approval(raw.get("approval"))
    leader = _section(LeaderSettings, raw.get("leader"), "leader")
    kube = _section(KubeSettings, raw.get("kube"), "kube")
    for k in ("host", "kubeconfig"):
        if getattr(kube, k) is not None and not isinstance(getattr(kube, k), str):
            raise ConfigError(f"kube.{k}: expected a string")
    audit_path = raw.get("audit_path")
    if audit_path is not None and not isinstance(audit_path, str):
        raise ConfigError("audit_path: expected a path")
    notify_url = raw.get("notify_url")
    if notify_url is not None:
        validation.http_url(notify_url, "notify_url", ConfigError)
    notify = raw.get("notify") or {}
    if not isinstance(notify, Mapping):
        raise ConfigError(f"notify: expected a mapping of {' and '.join(CATEGORIES)} to relay channel URLs")
    for category, url in notify.items():
        if category not in CATEGORIES:
            raise ConfigError(f"notify.{category}: unknown category, expected one of {', '.join(CATEGORIES)}")
        validation.http_url(url, f"notify.{category}", ConfigError)
    notify_token = (
        _read_secret(base, raw["notify_token_file"], "notify_token_file")
        if "notify_token_file" in raw
        else None
    )
    tick = raw.get("tick_seconds", 10.0)
    if isinstance(tick, bool) or not isinstance(tick, int | float) or tick <= 0:
        raise ConfigError("tick_seconds: expected a positive number")
    validation.number(
        tick, "tick_seconds", low=0, high=MAX_TICK_SECONDS, low_open=True, unit="seconds", error=ConfigError
    )
    return Settings(
        rules=tuple(rules),
        webhook=webhook,
        guard=guard,
        reclaim=reclaim,
        resize=resize,
        drain=drain,
        recheck=recheck,
        approval=approval,
        leader=leader,
        kube=kube,
        audit_path=audit_path,
        tick_seconds=float(tick),
        notify_url=notify_url,
        notify=dict(notify),
        notify_token=notify_token,
    )


def _approval(raw: Any) -> ApprovalSettings:
    if raw is None:
        return ApprovalSettings()
    if not isinstance(raw, Mapping):
        raise ConfigError("approval: expected a mapping")
    doc = dict(raw)
    over: dict[str, Any] = {}
    for key, known in (("actions", ACTIONS), ("namespaces", None)):
        m = doc.pop(key, None) or {}
        if not isinstance(m, Mapping):
            raise ConfigError(
                f"approval.{key}: expected a mapping of {'action' if known else 'namespace'} to auto|manual"
            )
        for k, v in m.items():
            if known is not None and k not in known:
                raise ConfigError(f"approval.{key}.{k}: unknown action, expected one of {', '.join(known)}")
            if known is None:
                namespace(k, f"approval.{key}.{k}")
            if v not in APPROVAL_MODES:
                raise ConfigError(f"approval.{key}.{k}: expected auto or manual")
        over[key] = dict(m)
    if doc.get("default", "auto") not in APPROVAL_MODES:
        raise ConfigError("approval.default: expected auto or manual")
    return _section(ApprovalSettings, doc, "approval", over)  # type: ignore[no-any-return]


def load(path: str | Path) -> Settings:
    """Read and validate the YAML config at ``path``. Errors: ``ConfigError``."""
    p = Path(path)
    raw = validation.yaml_file(p, "--config", ConfigError)
    return parse(raw, p.parent)
