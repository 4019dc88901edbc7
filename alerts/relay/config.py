"""Relay settings: the channels YAML parsed into frozen dataclasses (secrets read from files or environment)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from xpuwatch.alerts.spec import SEVERITIES
from xpuwatch.exporter import validation
from xpuwatch.exporter.credentials import is_bcrypt_hash

DEFAULT_LISTEN = ":9852"  # contract: relay default port 9852
DEFAULT_TIMEZONE = "Asia/Shanghai"
CHANNEL_TYPES = ("wecom", "feishu", "dingtalk")
SIGNED_TYPES = ("feishu", "dingtalk")  # bots with a signing secret and a custom-keyword setting
# Upper bounds (name -> (low, high, unit)); a value past one would overflow a timer or switch a bound off.
MAX_BODY_BYTES = 64 * validation.MIB  # an Alertmanager group of thousands of alerts is a few MiB
MAX_PARTS = 100  # parts per notification; each is one bot message under the bot's rate limit
MAX_RATE_COUNT = 1_000_000


class ConfigError(ValueError):
    """The configuration cannot work; the message names the key at fault. The relay refuses to start."""


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` messages in any window of ``per_seconds`` seconds (sliding window)."""

    count: int
    per_seconds: float


@dataclass(frozen=True)
class Mentions:
    """Who to mention on notifications with firing alerts.

    WeCom: ``users`` (userids, ``<@userid>`` in markdown), ``mobiles`` (follow-up text message with
    ``mentioned_mobile_list``), ``all`` (follow-up text with ``mentioned_list: ["@all"]``).
    Feishu: ``open_ids``/``user_ids`` (``<at id=...></at>``), ``all`` (``<at id=all></at>``).
    DingTalk: ``mobiles`` (``at.atMobiles`` plus ``@mobile`` in the text), ``all`` (``at.isAtAll``).
    ``severities``: mention only when a firing alert has one of these ``severity`` labels (empty = any).
    """

    users: tuple[str, ...] = ()
    mobiles: tuple[str, ...] = ()
    open_ids: tuple[str, ...] = ()
    user_ids: tuple[str, ...] = ()
    all: bool = False
    severities: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.users or self.mobiles or self.open_ids or self.user_ids or self.all)

    def wanted(self, firing_severities: Iterable[str]) -> bool:
        """Whether a notification whose firing alerts have these severities mentions anyone."""
        if self.empty:
            return False
        sev = list(firing_severities)
        return bool(sev) and (not self.severities or any(s in self.severities for s in sev))


@dataclass(frozen=True)
class Channel:
    """One destination group bot. ``webhook_url`` and ``secret`` hold the resolved secret values."""

    name: str
    type: str  # wecom | feishu | dingtalk
    webhook_url: str
    secret: str = ""  # Feishu/DingTalk signing secret; empty = unsigned
    keyword: str = ""  # Feishu/DingTalk "custom keyword" security setting: added to every message
    mentions: Mentions = field(default_factory=Mentions)
    timezone: str = DEFAULT_TIMEZONE
    templates: Mapping[str, str] = field(default_factory=dict)  # overrides: title, alert (source text)
    template_origins: Mapping[str, str] = field(default_factory=dict)  # name -> file it came from
    max_parts: int = 5  # parts per notification; alerts beyond are summarised ("N more alerts")
    rate_limits: tuple[RateLimit, ...] = ()  # () = the bot type's documented limits

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


@dataclass(frozen=True)
class Auth:
    """Inbound credentials Alertmanager must present (``http_config.authorization`` or ``basic_auth``)."""

    bearer_token: str = ""
    basic_username: str = ""
    basic_password: str = ""
    basic_password_hash: str = ""  # bcrypt ($2y$/$2b$), from password_hash_file; wins over basic_password


@dataclass(frozen=True)
class Retry:
    """Backoff for transient failures (5xx, timeouts): initial * multiplier**n, capped at max_seconds."""

    initial_seconds: float = 2.0
    max_seconds: float = 300.0
    multiplier: float = 2.0


@dataclass(frozen=True)
class Settings:
    """The whole relay configuration."""

    channels: Mapping[str, Channel]
    auth: Auth
    outbox: str = "relay-outbox.sqlite"
    listen_address: str = DEFAULT_LISTEN
    alertmanager_url: str = ""  # base for silence links; "" = the payload's externalURL
    max_body_bytes: int = 4 * 1024 * 1024
    dedup_window_seconds: float = 600.0
    max_delivery_age_seconds: float = 86400.0  # give up (recorded as failure "expired") after this long
    request_timeout_seconds: float = 10.0
    retry: Retry = field(default_factory=Retry)


_TOP_KEYS = {
    "listen_address",
    "outbox",
    "alertmanager_url",
    "max_body_bytes",
    "dedup_window_seconds",
    "max_delivery_age_seconds",
    "request_timeout_seconds",
    "retry",
    "auth",
    "channels",
}
_CHANNEL_KEYS = {
    "type",
    "webhook_url_file",
    "webhook_url_env",
    "secret_file",
    "secret_env",
    "keyword",
    "mentions",
    "timezone",
    "templates",
    "template_files",
    "max_parts",
    "rate_limits",
}
_MENTION_KEYS = {"users", "mobiles", "open_ids", "user_ids", "all", "emails", "severities"}
_TEMPLATE_KEYS = {"title", "alert"}


def load_settings(path: str | Path, env: Mapping[str, str] | None = None) -> Settings:
    """Read the YAML file at ``path``; relative secret files resolve against its folder. Raises ConfigError."""
    path = Path(path)
    doc = validation.yaml_file(path, "--config", ConfigError)
    return parse_settings(doc, base=path.parent, env=os.environ if env is None else env)


def parse_settings(doc: Any, base: Path, env: Mapping[str, str]) -> Settings:
    """Validate a decoded config document. Raises ConfigError."""
    if not isinstance(doc, dict):
        raise ConfigError("config must be a mapping")
    _no_unknown(doc, _TOP_KEYS, "config")
    channels_doc = doc.get("channels")
    if not isinstance(channels_doc, dict) or not channels_doc:
        raise ConfigError("channels: at least one channel is required")
    channels = {str(n): _channel(str(n), c, base, env) for n, c in channels_doc.items()}
    retry_doc = doc.get("retry", {}) or {}
    _no_unknown(retry_doc, {"initial_seconds", "max_seconds", "multiplier"}, "retry")
    retry = Retry(
        initial_seconds=_pos(
            retry_doc.get("initial_seconds", 2.0), "retry.initial_seconds", high=validation.HOUR
        ),
        max_seconds=_pos(retry_doc.get("max_seconds", 300.0), "retry.max_seconds", high=validation.DAY),
        multiplier=_pos(retry_doc.get("multiplier", 2.0), "retry.multiplier", high=10, unit=""),
    )
    alertmanager_url = doc.get("alertmanager_url", "")
    if alertmanager_url != "":
        validation.http_url(alertmanager_url, "alertmanager_url", ConfigError)
    outbox = doc.get("outbox", "relay-outbox.sqlite")
    return Settings(
        channels=channels,
        auth=_auth(doc.get("auth"), base, env),
        outbox=str(outbox if Path(str(outbox)).is_absolute() else base / str(outbox)),
        listen_address=str(doc.get("listen_address", DEFAULT_LISTEN)),
        alertmanager_url=str(alertmanager_url).rstrip("/"),
        max_body_bytes=int(
            _pos(
                doc.get("max_body_bytes", 4 * 1024 * 1024),
                "max_body_bytes",
                high=MAX_BODY_BYTES,
                unit="bytes",
            )
        ),
        dedup_window_seconds=_pos(
            doc.get("dedup_window_seconds", 600.0), "dedup_window_seconds", zero=True, high=validation.WEEK
        ),
        max_delivery_age_seconds=_pos(
            doc.get("max_delivery_age_seconds", 86400.0), "max_delivery_age_seconds", high=validation.WEEK
        ),
        request_timeout_seconds=_pos(
            doc.get("request_timeout_seconds", 10.0), "request_timeout_seconds", high=5 * validation.MINUTE
        ),
        retry=retry,
    )


def _channel(name: str, doc: Any, base: Path, env: Mapping[str, str]) -> Channel:
    where = f"channels.{name}"
    if not isinstance(doc, dict):
        raise ConfigError(f"{where} must be a mapping")
    _no_unknown(doc, _CHANNEL_KEYS, where)
    kind = doc.get("type")
    if kind not in CHANNEL_TYPES:
        raise ConfigError(f"{where}.type must be one of {list(CHANNEL_TYPES)}, got {kind!r}")
    url = _secret(doc, "webhook_url", base, env, where, required=True)
    url_key = f"{where}.webhook_url_file" if "webhook_url_file" in doc else f"{where}.webhook_url_env"
    validation.http_url(url, url_key, ConfigError)
    secret = _secret(doc, "secret", base, env, where, required=False)
    if secret and kind not in SIGNED_TYPES:
        raise ConfigError(f"{where}: a signing secret only applies to {' and '.join(SIGNED_TYPES)} bots")
    tz = str(doc.get("timezone", DEFAULT_TIMEZONE))
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{where}.timezone: unknown time zone {tz!r}") from None
    templates = doc.get("templates", {}) or {}
    if not isinstance(templates, dict) or not all(isinstance(v, str) for v in templates.values()):
        raise ConfigError(f"{where}.templates must map template names to strings")
    _no_unknown(templates, _TEMPLATE_KEYS, f"{where}.templates")
    templates, origins = dict(templates), {}
    files = doc.get("template_files", {}) or {}
    _no_unknown(files, _TEMPLATE_KEYS, f"{where}.template_files")
    for tname, fname in files.items():
        if tname in templates:
            raise ConfigError(f"{where}: give templates.{tname} or template_files.{tname}, not both")
        tpath = Path(str(fname))
        tpath = tpath if tpath.is_absolute() else base / tpath
        templates[tname] = validation.config_text(tpath, f"{where}.template_files.{tname}", ConfigError)
        origins[tname] = str(tpath)
    keyword = str(doc.get("keyword", ""))
    if keyword and kind not in SIGNED_TYPES:
        raise ConfigError(f"{where}.keyword only applies to {' and '.join(SIGNED_TYPES)} bots")
    limits = tuple(
        _rate_limit(r, f"{where}.rate_limits[{i}]") for i, r in enumerate(doc.get("rate_limits", []))
    )
    max_parts = doc.get("max_parts", 5)
    if isinstance(max_parts, bool) or not isinstance(max_parts, int) or max_parts < 1:
        raise ConfigError(f"{where}.max_parts must be a positive integer")
    if max_parts > MAX_PARTS:
        raise ConfigError(f"{where}.max_parts: must be at most {MAX_PARTS}, got {max_parts}")
    return Channel(
        name=name,
        type=kind,
        webhook_url=url,
        secret=secret,
        keyword=keyword,
        mentions=_mentions(doc.get("mentions", {}) or {}, f"{where}.mentions"),
        timezone=tz,
        templates=templates,
        template_origins=origins,
        max_parts=max_parts,
        rate_limits=limits,
    )


def _mentions(doc: Any, where: str) -> Mentions:
    if not isinstance(doc, dict):
        raise ConfigError(f"{where} must be a mapping")
    _no_unknown(doc, _MENTION_KEYS, where)

    def ids(key: str) -> tuple[str, ...]:
        value = doc.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str | int) for v in value):
            raise ConfigError(f"{where}.{key} must be a list of strings")
        return tuple(str(v) for v in value)

    if ids("emails"):
        # Kept so the platform check can refuse it with the reason (Feishu custom bots: 11246).
        raise ConfigError(
            f"{where}.emails: custom group bots cannot mention by email (Feishu answers 11246 'invalid at "
            "user'); use open_ids or user_ids"
        )
    severities = ids("severities")
    unknown = [s for s in severities if s not in SEVERITIES]
    if unknown:
        # a typo here would silently mean "never mention" (no alert carries that severity)
        raise ConfigError(
            f"{where}.severities: {unknown[0]!r} is not a severity of the alert spec ({', '.join(SEVERITIES)})"
        )
    return Mentions(
        users=ids("users"),
        mobiles=ids("mobiles"),
        open_ids=ids("open_ids"),
        user_ids=ids("user_ids"),
        all=validation.boolean(doc.get("all", False), f"{where}.all", ConfigError),
        severities=severities,
    )


def _rate_limit(doc: Any, where: str) -> RateLimit:
    if not isinstance(doc, dict):
        raise ConfigError(f"{where} must be a mapping with count and per_seconds")
    _no_unknown(doc, {"count", "per_seconds"}, where)
    count = doc.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"{where}.count must be a positive integer")
    if count > MAX_RATE_COUNT:
        raise ConfigError(f"{where}.count: must be at most {MAX_RATE_COUNT}, got {count}")
    per = _pos(doc.get("per_seconds"), f"{where}.per_seconds", high=validation.DAY)
    return RateLimit(count=count, per_seconds=per)


def _auth(doc: Any, base: Path, env: Mapping[str, str]) -> Auth:
    if not isinstance(doc, dict):
        raise ConfigError("auth: inbound webhooks need bearer_token_file/_env or basic_auth")
    _no_unknown(doc, {"bearer_token_file", "bearer_token_env", "basic_auth"}, "auth")
    token = _secret(doc, "bearer_token", base, env, "auth", required=False)
    basic = doc.get("basic_auth")
    user = password = password_hash = ""
    if basic is not None:
        if not isinstance(basic, dict):
            raise ConfigError("auth.basic_auth must be a mapping")
        _no_unknown(
            basic, {"username", "password_file", "password_env", "password_hash_file"}, "auth.basic_auth"
        )
        user = str(basic.get("username", ""))
        if "password_hash_file" in basic:
            if "password_file" in basic or "password_env" in basic:
                raise ConfigError("auth.basic_auth: give password_hash_file or password_file/_env, not both")
            password_hash = _secret(basic, "password_hash", base, env, "auth.basic_auth", required=True)
            if not is_bcrypt_hash(password_hash):
                raise ConfigError(
                    "auth.basic_auth.password_hash_file: not a bcrypt hash ($2y$10$... as written by "
                    "htpasswd -nBC 10)"
                )
        else:
            password = _secret(basic, "password", base, env, "auth.basic_auth", required=True)
        if not user:
            raise ConfigError("auth.basic_auth.username is required")
    if not token and not user:
        raise ConfigError("auth: inbound webhooks need bearer_token_file/_env or basic_auth")
    return Auth(
        bearer_token=token, basic_username=user, basic_password=password, basic_password_hash=password_hash
    )


def _secret(
    doc: dict[str, Any], key: str, base: Path, env: Mapping[str, str], where: str, required: bool
) -> str:
    file_key, env_key = f"{key}_file", f"{key}_env"
    if file_key in doc and env_key in doc:
        raise ConfigError(f"{where}: give {file_key} or {env_key}, not both")
    if file_key in doc:
        path = Path(str(doc[file_key]))
        path = path if path.is_absolute() else base / path
        # empty is refused like an empty *_env: an empty secret_file would silently mean "unsigned"
        try:
            value = validation.secret_text(path, f"{where}.{file_key}", ConfigError)
        except ConfigError as exc:
            if key == "secret" and str(exc).endswith(" is empty"):
                raise ConfigError(f"{exc} (for an unsigned bot leave {file_key} out)") from None
            raise
    elif env_key in doc:
        value = env.get(str(doc[env_key]), "").strip()
        if not value:
            raise ConfigError(f"{where}.{env_key}: environment variable {doc[env_key]!r} is unset or empty")
    else:
        value = ""
    if required and not value:
        raise ConfigError(f"{where}: {file_key} or {env_key} is required")
    return value


def _pos(
    value: Any, where: str, zero: bool = False, high: float = validation.DAY, unit: str = "seconds"
) -> float:
    """A finite number > 0 (>= 0 with ``zero``) and <= ``high``."""
    return validation.number(value, where, low=0, high=high, low_open=not zero, unit=unit, error=ConfigError)


def _no_unknown(doc: Any, allowed: set[str], where: str) -> None:
    if not isinstance(doc, dict):
        raise ConfigError(f"{where} must be a mapping")
    unknown = sorted(set(map(str, doc)) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; allowed {sorted(allowed)}")
