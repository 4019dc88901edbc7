"""Alert spec: parses alerts/spec.yaml into the frozen dataclasses the rule and Alertmanager builders read.

Every value in the YAML is written ``{value: ..., reason: "..."}``; a value without a reason is an error, so
the file keeps saying why each number is what it is. Parsing is strict (unknown labels, bad durations and
missing reasons raise :class:`SpecError` naming the path), and pure: :func:`parse_spec` takes the decoded
YAML, :func:`load_spec` reads a file.

A user spec is an overlay (the kubernetes-mixin habit of a small config on top of the defaults): any subset
of the default keys, e.g. one threshold, one ``for``, the job selector, ``alert_labels`` or
``disabled_alerts``. :func:`overlay` merges it onto the decoded defaults (a key the defaults lack is a
SpecError naming it) and :func:`load_user_spec` reads, merges and parses.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import re2  # google-re2: the regex syntax Prometheus compiles (Go regexp/syntax is RE2's)

from xpuwatch.exporter import validation

DEFAULT_SPEC_PATH = Path(__file__).parent / "spec.yaml"

CATEGORIES = ("hardware", "performance", "meta")
SEVERITIES = ("critical", "warning", "info")
ACTIONS = ("drain", "reclaim", "resize", "none")
# Prometheus duration (common/model ParseDuration, also Alertmanager's): units largest first, each at most
# once, e.g. "90s", "1h30m", "0m"; "1m1h" and "5s5s" are refused there, so here too.
_DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")
_DURATION_MS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1000, 1)
_MAX_DURATION_MS = (1 << 63) - 1  # a time.Duration in nanoseconds would be smaller; ParseDuration's own bound


class SpecError(ValueError):
    """The spec is malformed; the message names the offending path (e.g. ``alerts.X.for``)."""


@dataclass(frozen=True)
class Param:
    """One tunable: its value (number, duration string, selector, list or mapping) and why it is so."""

    value: Any
    reason: str


@dataclass(frozen=True)
class AlertSpec:
    """The tunables of one alert: routing labels, `for` duration and its own named parameters."""

    name: str
    category: str
    severity: str
    action: str
    for_: str
    params: Mapping[str, Param]

    def value(self, key: str) -> Any:
        """The value of parameter ``key``; SpecError names the alert when the spec lacks it."""
        try:
            return self.params[key].value
        except KeyError:
            raise SpecError(f"alerts.{self.name}: missing parameter {key!r}") from None


@dataclass(frozen=True)
class RouteSpec:
    """A child route of the Alertmanager tree (durations are Alertmanager durations)."""

    receiver: str
    group_by: tuple[str, ...]
    group_wait: str
    group_interval: str
    repeat_interval: str


@dataclass(frozen=True)
class Routing:
    """The routing tree's receivers and timings. Receiver names are relay channel names: every receiver that
    reaches people posts to the relay channel of its own name (docs/alerts.md "Routing in your setup").
    Hardware, performance and capacity may share one receiver (one bot); ``""`` in the spec for
    ``root_receiver``, ``capacity.receiver`` and ``meta.relay_channel`` means the performance receiver, and
    is resolved here."""

    root_receiver: str
    root_group_by: tuple[str, ...]
    hardware: RouteSpec
    performance: RouteSpec
    remediation: RouteSpec
    remediation_actions: tuple[str, ...]
    capacity: RouteSpec | None = None
    capacity_alerts: tuple[str, ...] = ()
    meta: RouteSpec | None = None
    """The ``category="meta"`` alerts (the paging path's own health): a receiver of their own."""
    meta_relay_channel: str = ""
    """The relay channel the meta receiver posts to besides the out-of-band webhook: not the on-call bot
    where another bot exists."""
    remediation_enabled: bool = True
    """``routing.remediation.enabled``: False where no remediation controller runs. No remediate route or
    receiver is generated and the controller's own meta alerts (those with a ``remediation_selector``) are
    left out of the rules."""

    @property
    def people(self) -> tuple[str, ...]:
        """The receivers that reach people through the relay, each once, in route order."""
        names = [self.hardware.receiver, self.performance.receiver]
        if self.capacity is not None:
            names.append(self.capacity.receiver)
        return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Inhibition:
    """The ``equal`` label lists of the three inhibition rules."""

    critical_hardware_silences_performance: tuple[str, ...]
    critical_hardware_silences_hardware_warnings: tuple[str, ...]
    exporter_down_silences_node: tuple[str, ...]


@dataclass(frozen=True)
class Spec:
    """The parsed spec. ``exporter_job_selector`` and ``cluster_selector`` are label matchers (``cluster`` may be
    empty: no matcher) added to every exporter series the rules read; ``alert_labels`` are added to every
    alert; ``disabled_alerts`` are left out of the generated rules."""

    runbook_base_url: str
    exporter_job_selector: str
    cluster_selector: str
    kube_state_metrics_selector: str
    alert_labels: Mapping[str, str]
    disabled_alerts: tuple[str, ...]
    node_memory_lookback: str
    prometheusrule_name: str
    prometheusrule_labels: Mapping[str, str]
    recording: Mapping[str, Param]
    alerts: tuple[AlertSpec, ...]
    routing: Routing
    inhibition: Inhibition

    def enabled(self, a: AlertSpec) -> bool:
        """Whether alert ``a`` is generated: not in ``disabled_alerts``, and not a remediation controller's
        own alert (a ``remediation_selector`` parameter) where ``routing.remediation.enabled`` is false."""
        if a.name in self.disabled_alerts:
            return False
        return self.routing.remediation_enabled or "remediation_selector" not in a.params

    def alert(self, name: str) -> AlertSpec:
        for a in self.alerts:
            if a.name == name:
                return a
        raise KeyError(f"no alert {name!r} in the spec")

    def rec(self, key: str) -> Any:
        """The value of recording parameter ``key``; SpecError when the spec lacks it."""
        try:
            return self.recording[key].value
        except KeyError:
            raise SpecError(f"recording: missing parameter {key!r}") from None

    def with_overrides(self, overrides: Mapping[str, Mapping[str, Any]]) -> Spec:
        """A copy with alert parameters replaced: ``{"AlertName": {"for": "0s", "window": "30s"}}``.

        Used by tests and demos that need short durations; the reason of each replaced value is kept.
        """
        alerts = []
        for a in self.alerts:
            change = dict(overrides.get(a.name, {}))
            for_ = _duration(change.pop("for", a.for_), f"alerts.{a.name}.for")
            unknown = set(change) - set(a.params)
            if unknown:
                raise SpecError(f"alerts.{a.name}: no parameters {sorted(unknown)} to override")
            for k, v in change.items():
                _check_param(k, v, f"alerts.{a.name}.{k}")
            params = {k: Param(change.get(k, p.value), p.reason) for k, p in a.params.items()}
            alerts.append(dataclasses.replace(a, for_=for_, params=MappingProxyType(params)))
        missing = set(overrides) - {a.name for a in self.alerts}
        if missing:
            raise SpecError(f"overrides name unknown alerts {sorted(missing)}")
        return dataclasses.replace(self, alerts=tuple(alerts))


def _read(path: Path) -> Any:
    return validation.yaml_file(path, "--spec", SpecError)


def load_spec(path: Path = DEFAULT_SPEC_PATH) -> Spec:
    """Read and parse a complete spec file. Raises SpecError (unreadable, not YAML, bad content)."""
    return parse_spec(_read(path))


def load_user_spec(path: Path, defaults: Path = DEFAULT_SPEC_PATH) -> Spec:
    """A user spec (any subset of the default keys) laid over the defaults, parsed. A complete spec is an
    overlay that replaces every value. Raises SpecError naming the first bad key or the unreadable file."""
    user = _read(path)
    if user is None:  # an empty file changes nothing
        user = {}
    return parse_spec(overlay(_read(defaults), user, source=path.name))


def _is_param(node: Any) -> bool:
    return isinstance(node, dict) and set(node) == {"value", "reason"}


def overlay(defaults: Any, user: Any, source: str = "user spec", path: str = "") -> Any:
    """``defaults`` (decoded spec YAML) with ``user``'s values laid over it; neither is modified.

    Where the defaults hold a ``{value, reason}`` entry the user gives ``{value: X}``, ``{value: X, reason:
    R}`` or just ``X``; the value is replaced whole (a mapping value such as ``alert_labels`` or ``codes`` is
    not merged key by key), and without a reason it reads "set by <source>". Elsewhere mappings merge key by
    key. A key the defaults lack raises SpecError naming its path and the keys that exist there.
    """
    where = path or "spec"
    if _is_param(defaults):
        if isinstance(user, dict) and "value" in user and set(user) <= {"value", "reason"}:
            return {"value": user["value"], "reason": user.get("reason", f"set by {source}")}
        if isinstance(user, dict) and "reason" in user:
            raise SpecError(f"{where}: expected {{value: ..., reason: ...}}, got {user!r}")
        return {"value": user, "reason": f"set by {source}"}
    if not isinstance(defaults, dict):  # pragma: no cover - the default spec is mappings down to params
        return user
    if not isinstance(user, dict):
        raise SpecError(f"{where}: expected a mapping, got {type(user).__name__}")
    out = dict(defaults)
    for key, node in user.items():
        sub = f"{path}.{key}" if path else str(key)
        if key not in defaults:
            raise SpecError(
                f"{sub}: not a key of the default spec (known here: {', '.join(map(str, defaults))})"
            )
        out[key] = overlay(defaults[key], node, source, sub)
    return out


def _param(node: Any, path: str) -> Param:
    if not isinstance(node, dict) or set(node) != {"value", "reason"}:
        raise SpecError(f"{path}: expected {{value: ..., reason: ...}}, got {node!r}")
    reason = node["reason"]
    if not isinstance(reason, str) or not reason.strip():
        raise SpecError(f"{path}: the reason must be a non-empty string")
    return Param(node["value"], reason)


def _mapping(node: Any, path: str) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise SpecError(f"{path}: expected a mapping, got {type(node).__name__}")
    return node


def _duration(value: Any, path: str) -> str:
    m = _DURATION.match(value) if isinstance(value, str) and value else None
    if m is None:
        raise SpecError(f"{path}: {value!r} is not a Prometheus duration like 5m or 1h30m")
    total = sum(int(n) * ms for n, ms in zip(m.groups(), _DURATION_MS, strict=True) if n)
    if total > _MAX_DURATION_MS:
        raise SpecError(f"{path}: {value!r} is out of range for a Prometheus duration")
    return value


def duration_seconds(value: str) -> float:
    """Seconds of a Prometheus duration (``"1h30m"`` -> 5400.0). Raises SpecError on anything else."""
    m = _DURATION.match(_duration(value, "duration"))
    assert m is not None  # _duration checked it
    return sum(int(n) * ms for n, ms in zip(m.groups(), _DURATION_MS, strict=True) if n) / 1000


def _choice(value: Any, choices: tuple[str, ...], path: str) -> str:
    if value not in choices:
        raise SpecError(f"{path}: {value!r} is not one of {', '.join(choices)}")
    return str(value)


def _name(value: Any, path: str, empty_ok: bool = False) -> str:
    """A receiver (= relay channel) name: letters, digits, ``_.-``; ``""`` only where ``empty_ok`` (the
    performance receiver)."""
    if empty_ok and value == "":
        return ""
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        raise SpecError(f"{path}: {value!r} is not a receiver name")
    return value


def _flag(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{path}: expected true or false, got {value!r}")
    return value


def _labels(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SpecError(f"{path}: expected a list of label names")
    return tuple(value)


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
        raise SpecError(f"{path}: {value!r} is not a non-negative number")
    validation.finite(value, path, SpecError)  # .inf renders as +Inf: an alert that can never fire
    return value


# One PromQL label matcher: name, operator, double-quoted value (backslash escapes allowed).
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_MATCHERS = re.compile(rf"^{_MATCHER}(,{_MATCHER})*$")
_ONE_MATCHER = re.compile(r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')
# The escapes a double-quoted PromQL string allows (promql/parser/lex.go lexEscape, then strconv.Unquote).
_ESCAPE = re.compile(
    r'\\(?:([abfnrtv\\"])|([0-7]{3})|x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.))', re.S
)
_ESCAPED = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"'}
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # else RE2 logs each bad pattern to stderr besides raising


def _promql_string(body: str, path: str) -> str:
    """The value of a double-quoted PromQL string literal (``body`` without its quotes)."""

    def one(m: re.Match[str]) -> str:
        simple, octal, x, u, big, bad = m.groups()
        if bad is not None:
            raise SpecError(
                f"{path}: unknown escape \\{bad} in a PromQL string (a regex's backslash is written \\\\)"
            )
        if simple is not None:
            return _ESCAPED[simple]
        code = int(octal, 8) if octal else int(x or u or big, 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise SpecError(f"{path}: escape {m.group()} is not a Unicode character")
        return chr(code)

    return _ESCAPE.sub(one, body)


def check_regex(pattern: str, path: str) -> str:
    """``pattern`` if Prometheus can compile it: RE2 syntax (Go ``regexp``), which lacks lookaround and
    backreferences that Python's ``re`` has and has ``\\pL``/``[[:alpha:]]`` that ``re`` lacks.
    Raises SpecError: ``<path>: invalid regex 'a(?=b)': invalid perl operator: (?=``."""
    try:
        re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise SpecError(f"{path}: invalid regex {pattern!r}: {reason}") from None
    return pattern


def parse_matchers(selector: str) -> list[tuple[str, str, str]]:
    """``'job=~"a|b", cluster="x"'`` -> ``[("job", "=~", "a|b"), ("cluster", "=", "x")]`` (values unescaped
    as PromQL reads them). The selector must already be valid (the spec's selectors are)."""
    out = []
    for m in _ONE_MATCHER.finditer(selector):
        name = m.group(0).strip().partition(m.group(1))[0].strip()  # label names hold no operator characters
        out.append((name, m.group(1), _promql_string(m.group(2), "selector")))
    return out


def matches(matcher: tuple[str, str, str], value: str) -> bool:
    """Whether a label ``value`` ("" for a missing label) satisfies one parsed matcher, as Prometheus
    decides: regexes are RE2 and anchored at both ends."""
    _, op, want = matcher
    if op in ("=", "!="):
        return (value == want) == (op == "=")
    hit = re2.fullmatch(want, value, _RE2_OPTIONS) is not None
    return hit == (op == "=~")


def _selector(value: Any, path: str, empty_ok: bool = False) -> str:
    """A comma-separated list of label matchers (``job=~"a|b", cluster="x"``), as written inside braces.
    String escapes and ``=~``/``!~`` regexes are checked as Prometheus parses them."""
    if empty_ok and value == "":
        return ""
    if not isinstance(value, str) or not _MATCHERS.match(value):
        raise SpecError(f'{path}: {value!r} is not a list of label matchers like job="xpuwatch"')
    for m in _ONE_MATCHER.finditer(value):
        text = _promql_string(m.group(2), path)
        if m.group(1) in ("=~", "!~"):
            check_regex(text, path)
    return value.strip()


_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RULE_LABELS = ("category", "severity", "action")


def _alert_labels(value: Any, path: str) -> dict[str, str]:
    labels = _mapping(value, path)
    for k, v in labels.items():
        if not isinstance(k, str) or not _LABEL_NAME.match(k) or k.startswith("__"):
            raise SpecError(f"{path}: {k!r} is not a label name")
        if k in _RULE_LABELS:
            raise SpecError(f"{path}.{k}: set per alert; alert_labels may not replace it")
        if not isinstance(v, str | int | float) or isinstance(v, bool):
            raise SpecError(f"{path}.{k}: {v!r} is not a label value")
    return {k: str(v) for k, v in labels.items()}


def _check_param(key: str, value: Any, path: str) -> None:
    """Type-check a parameter by its name, so a typo never reaches the generated PromQL."""
    if key in ("window", "lookback") or key.endswith("_window"):
        _duration(value, path)
    elif key == "codes":
        for vendor, table in _mapping(value, path).items():
            if not isinstance(vendor, str) or not re.fullmatch(r"[a-z0-9_]+", vendor):
                raise SpecError(f"{path}: vendor {vendor!r} is not a vendor label value")
            for code, meaning in _mapping(table, f"{path}.{vendor}").items():
                if not re.fullmatch(r"[0-9A-Za-z]+", str(code)) or not isinstance(meaning, str):
                    raise SpecError(f"{path}.{vendor}: {code!r} must map a code to its meaning")
    elif key.endswith("_resources"):
        for vendor, regex in _mapping(value, path).items():
            if not isinstance(vendor, str) or not re.fullmatch(r"[a-z0-9_]+", vendor):
                raise SpecError(f"{path}: vendor {vendor!r} is not a vendor label value")
            if not isinstance(regex, str) or not regex or '"' in regex or "\\" in regex:
                raise SpecError(
                    f"{path}.{vendor}: expected a resource-name regex without quotes or backslashes"
                )
            check_regex(regex, f"{path}.{vendor}")
    elif key in ("reasons", "metrics"):
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(v, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) for v in value)
        ):
            raise SpecError(f"{path}: expected a non-empty list of names")
    elif key.endswith("_selector"):
        _selector(value, path)
    else:
        _number(value, path)


def _alert(name: str, node: Any) -> AlertSpec:
    path = f"alerts.{name}"
    raw = {k: _param(v, f"{path}.{k}") for k, v in _mapping(node, path).items()}
    for key in ("category", "severity", "action", "for"):
        if key not in raw:
            raise SpecError(f"{path}: missing {key}")
    params: dict[str, Param] = {}
    for key, p in raw.items():
        if key in ("category", "severity", "action", "for"):
            continue
        _check_param(key, p.value, f"{path}.{key}")
        params[key] = p
    return AlertSpec(
        name=name,
        category=_choice(raw["category"].value, CATEGORIES, f"{path}.category"),
        severity=_choice(raw["severity"].value, SEVERITIES, f"{path}.severity"),
        action=_choice(raw["action"].value, ACTIONS, f"{path}.action"),
        for_=_duration(raw["for"].value, f"{path}.for"),
        params=MappingProxyType(params),
    )


def _route(node: Any, path: str, empty_receiver: bool = False) -> RouteSpec:
    m = _mapping(node, path)
    v = {k: _param(m.get(k), f"{path}.{k}").value for k in m}
    try:
        return RouteSpec(
            receiver=_name(v["receiver"], f"{path}.receiver", empty_receiver),
            group_by=_labels(v["group_by"], f"{path}.group_by"),
            group_wait=_duration(v["group_wait"], f"{path}.group_wait"),
            group_interval=_duration(v["group_interval"], f"{path}.group_interval"),
            repeat_interval=_duration(v["repeat_interval"], f"{path}.repeat_interval"),
        )
    except KeyError as exc:
        raise SpecError(f"{path}: missing {exc.args[0]}") from None


def _resolved(r: Routing) -> Routing:
    """``""`` receivers resolved to the performance receiver, then the combinations that cannot work
    refused. Hardware, performance and capacity may share a receiver (one bot for everything); the
    remediation receiver posts to the controller, not the relay, and the meta receiver carries its own
    webhooks, so neither may share a name with another receiver."""
    perf = r.performance.receiver
    capacity = r.capacity
    if capacity is not None and not capacity.receiver:
        capacity = dataclasses.replace(capacity, receiver=perf)
    r = dataclasses.replace(
        r,
        root_receiver=r.root_receiver or perf,
        capacity=capacity,
        meta_relay_channel=r.meta_relay_channel or perf,
    )
    people = r.people
    if r.root_receiver not in people:
        raise SpecError(f"routing.root_receiver: {r.root_receiver!r} is none of {sorted(people)}")
    if r.remediation_enabled and r.remediation.receiver in people:
        raise SpecError(
            f"routing.remediation.receiver: {r.remediation.receiver!r} is also a receiver of people; the "
            "remediation receiver posts to the controller and needs a name of its own"
        )
    if r.meta is not None:
        taken = set(people) | ({r.remediation.receiver} if r.remediation_enabled else set())
        if r.meta.receiver in taken:
            raise SpecError(
                f"routing.meta.receiver: {r.meta.receiver!r} must be a receiver of its own (it must not depend "
                "on the on-call bot)"
            )
        if r.meta_relay_channel == r.hardware.receiver and r.hardware.receiver != perf:
            raise SpecError(
                f"routing.meta.relay_channel: {r.meta_relay_channel!r} is the on-call channel while another "
                f"bot ({perf!r}) exists; a broken on-call bot would also hide the alerts about it"
            )
    return r


def parse_spec(data: Any) -> Spec:
    """Build a Spec from decoded YAML; raises SpecError naming the first bad path."""
    top = _mapping(data, "spec")
    try:
        alerts_node = _mapping(top["alerts"], "alerts")
        recording = {
            k: _param(v, f"recording.{k}") for k, v in _mapping(top["recording"], "recording").items()
        }
        for k, p in recording.items():
            _check_param(k, p.value, f"recording.{k}")
        pr = _mapping(top["prometheusrule"], "prometheusrule")
        routing = _mapping(top["routing"], "routing")
        inhibition = _mapping(top["inhibition"], "inhibition")
        remediation = dict(_mapping(routing["remediation"], "routing.remediation"))
        actions = _param(remediation.pop("actions", None), "routing.remediation.actions").value
        remediation_enabled = _flag(
            _param(remediation.pop("enabled", None), "routing.remediation.enabled").value,
            "routing.remediation.enabled",
        )
        capacity_node = routing.get("capacity")
        capacity: RouteSpec | None = None
        capacity_alerts: tuple[str, ...] = ()
        if capacity_node is not None:
            capacity_map = dict(_mapping(capacity_node, "routing.capacity"))
            capacity_alerts = _labels(
                _param(capacity_map.pop("alerts", None), "routing.capacity.alerts").value,
                "routing.capacity.alerts",
            )
            capacity = _route(capacity_map, "routing.capacity", empty_receiver=True)
        meta_node = routing.get("meta")
        meta: RouteSpec | None = None
        meta_channel = ""
        if meta_node is not None:
            meta_map = dict(_mapping(meta_node, "routing.meta"))
            meta_channel = _name(
                _param(meta_map.pop("relay_channel", None), "routing.meta.relay_channel").value,
                "routing.meta.relay_channel",
                empty_ok=True,
            )
            meta = _route(meta_map, "routing.meta")
        if not isinstance(actions, list) or not actions:
            raise SpecError(
                "routing.remediation.actions: expected a non-empty list of actions (where no remediation "
                "controller runs, set routing.remediation.enabled: false instead)"
            )
        for a in actions:
            _choice(a, tuple(x for x in ACTIONS if x != "none"), "routing.remediation.actions")

        def equal(key: str) -> tuple[str, ...]:
            value = _param(inhibition.get(key), f"inhibition.{key}").value
            return _labels(_mapping(value, f"inhibition.{key}").get("equal"), f"inhibition.{key}.equal")

        pr_labels = _param(pr.get("labels"), "prometheusrule.labels").value
        alerts = tuple(_alert(name, node) for name, node in alerts_node.items())
        disabled = _param(top["disabled_alerts"], "disabled_alerts").value
        if not isinstance(disabled, list) or not all(isinstance(d, str) for d in disabled):
            raise SpecError("disabled_alerts: expected a list of alert names")
        unknown = sorted(set(disabled) - {a.name for a in alerts})
        if unknown:
            raise SpecError(f"disabled_alerts: no alerts named {unknown}")

        def top_selector(key: str, empty_ok: bool = False) -> str:
            return _selector(_param(top[key], key).value, key, empty_ok)

        return Spec(
            runbook_base_url=validation.http_url(
                _param(top["runbook_base_url"], "runbook_base_url").value, "runbook_base_url", SpecError
            ).rstrip("/"),
            exporter_job_selector=top_selector("exporter_job_selector"),
            cluster_selector=top_selector("cluster_selector", empty_ok=True),
            kube_state_metrics_selector=top_selector("kube_state_metrics_selector"),
            alert_labels=MappingProxyType(
                _alert_labels(_param(top["alert_labels"], "alert_labels").value, "alert_labels")
            ),
            disabled_alerts=tuple(disabled),
            node_memory_lookback=_duration(
                _param(top["node_memory_lookback"], "node_memory_lookback").value, "node_memory_lookback"
            ),
            prometheusrule_name=str(_param(pr.get("name"), "prometheusrule.name").value),
            prometheusrule_labels=MappingProxyType(
                {str(k): str(v) for k, v in _mapping(pr_labels, "prometheusrule.labels").items()}
            ),
            recording=MappingProxyType(recording),
            alerts=alerts,
            routing=_resolved(
                Routing(
                    root_receiver=_name(
                        _param(routing["root_receiver"], "routing.root_receiver").value,
                        "routing.root_receiver",
                        empty_ok=True,
                    ),
                    root_group_by=_labels(
                        _param(routing["root_group_by"], "routing.root_group_by").value,
                        "routing.root_group_by",
                    ),
                    hardware=_route(routing["hardware"], "routing.hardware"),
                    performance=_route(routing["performance"], "routing.performance"),
                    remediation=_route(remediation, "routing.remediation"),
                    remediation_actions=tuple(actions),
                    capacity=capacity,
                    capacity_alerts=capacity_alerts,
                    meta=meta,
                    meta_relay_channel=meta_channel,
                    remediation_enabled=remediation_enabled,
                )
            ),
            inhibition=Inhibition(
                critical_hardware_silences_performance=equal("critical_hardware_silences_performance"),
                critical_hardware_silences_hardware_warnings=equal(
                    "critical_hardware_silences_hardware_warnings"
                ),
                exporter_down_silences_node=equal("exporter_down_silences_node"),
            ),
        )
    except KeyError as exc:
        raise SpecError(f"spec: missing top-level key {exc.args[0]!r}") from None
