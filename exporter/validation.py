"""Checks shared by every service's settings parser (exporter, relay, remediation, alert spec): a value that
would break later (an overflowing sleep, a header that fails every response, a ``javascript:`` link, an
empty secret file that silently turns signing off) is refused at start instead.

Each check returns the cleaned value or raises ``error`` (the caller's ``ConfigError`` / ``SpecError``)
with a message that starts with the key: ``backends.nvml.interval: must be a number > 0 and <= 3600
(seconds), got 1e+308``. The CLIs print it as the one config-error line and exit 2 (``exporter.logs``).

Sources: header fields follow RFC 9110 section 5 (a field name is a ``token``; a field value holds no CR,
LF, NUL or other control character but HTAB); URLs are parsed with ``urllib.parse.urlsplit``.

Every config file (the services' configs, web configs, token and secret files, alert specs, the demo's
scenario, a user's scrape or Alertmanager config) is read by ``config_text``/``yaml_file`` (the simulator's
scenario, in the vendors layer, through the same ``read_capped``): a regular file only (a FIFO or
device named by mistake is refused without blocking), at most ``MAX_CONFIG_BYTES``, UTF-8, and each
failure says which option or key named the file.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from xpuwatch.vendors.untrusted import RefusedFile, read_capped

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
WEEK = 7 * DAY
MAX_DURATION_SECONDS = 30 * DAY
"""Longest duration any setting accepts unless it says otherwise: a month (cooldowns, delivery ages)."""
MIB = 1 << 20
GIB = 1 << 30
MAX_NUMBER = 1e9
"""Largest value of a count or other unitless setting without a bound of its own."""

# RFC 9110 5.6.2: token = 1*tchar
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# RFC 9110 5.5: field-value octets are VCHAR, obs-text, SP and HTAB; CR, LF, NUL and other controls are not
_FIELD_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's booleans (core schema): ``true``/``True``/``TRUE`` and
    ``false``/``False``/``FALSE`` only. YAML 1.1's ``yes``, ``no``, ``on``, ``off`` stay the text written, as
    a YAML 1.2 reader reads them: where a boolean is expected they are refused like a quoted ``"false"``, and
    where text is expected (a label value ``no``, the country code) they are not turned into False."""


_BOOL_TAG = "tag:yaml.org,2002:bool"
_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


MAX_CONFIG_BYTES = 16 * MIB
"""The largest config file read: far above any real one (the shipped spec is 37 KiB; a large
Alertmanager config a few hundred KiB), small enough that a wrong path (a log, an image) is refused by its
size instead of being parsed."""


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line error as one line: ``line 3, column 7: found unexpected end of stream`` (the
    position of the problem, 1-based, then what PyYAML found). Every config reader says it this way."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    text = " ".join(str(problem or exc).split())
    if mark is None:
        return text
    return f"line {mark.line + 1}, column {mark.column + 1}: {text}"


def config_text(path: Path | str, what: str, error: type[Exception] = ValueError) -> str:
    """The text of the config file at ``path`` that ``what`` (an option or key: ``--config``,
    ``web.config_file``) names. Symlinks are followed (a ConfigMap mount is one). Raises ``error``:
    ``{what}: cannot read {path}: {why}`` (missing, unreadable, not a regular file, over
    ``MAX_CONFIG_BYTES``) or ``{what}: {path} is not UTF-8 text ({reason} at byte {n})``."""
    try:
        return read_capped(Path(path), MAX_CONFIG_BYTES, follow_symlinks=True).decode("utf-8")
    except RefusedFile as exc:
        raise error(f"{what}: cannot read {path}: {exc.why}") from None
    except OSError as exc:
        raise error(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:  # a binary file named by mistake: say which, not the codec's words
        raise error(f"{what}: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def yaml_file(
    path: Path | str, what: str, error: type[Exception] = ValueError, *, foreign: bool = False
) -> Any:
    """The YAML document in the config file at ``path`` (``config_text``), read with ``load_yaml``, or with
    PyYAML's ``safe_load`` for a ``foreign`` file (a user's Prometheus or Alertmanager config, which Go's
    YAML reads). Raises ``error`` as ``config_text`` does, or ``{what}: {path} is not valid YAML: line L,
    column C: {problem}``."""
    text = config_text(path, what, error)
    try:
        return yaml.safe_load(text) if foreign else load_yaml(text)
    except yaml.YAMLError as exc:
        raise error(f"{what}: {path} is not valid YAML: {yaml_problem(exc)}") from None


def naming_once(exc: Exception, what: str, where: str) -> str:
    """``exc``'s message naming its file once: a ``config_text``/``yaml_file`` error starts with ``what``
    and names the file already; any other (a content error) is prefixed with ``where``."""
    text = str(exc)
    return text if text.startswith(f"{what}: ") else f"{where}: {text}"


def load_yaml(text: str) -> Any:
    """A config file's YAML document, booleans read as YAML 1.2 reads them (``_Yaml12Loader``). Raises
    yaml.YAMLError. Every service's config, web config and alert spec is read with it."""
    return yaml.load(text, Loader=_Yaml12Loader)


def boolean(value: Any, key: str, error: type[ValueError] = ValueError) -> bool:
    """``value`` if it is a YAML boolean (``true``/``false``), else ``error``: a quoted ``"false"`` is a
    string, which Python would call true."""
    if not isinstance(value, bool):
        raise error(f"{key}: must be true or false, got {value!r}")
    return value


def number(
    value: Any,
    key: str,
    *,
    low: float,
    high: float,
    unit: str = "",
    low_open: bool = False,
    integer: bool = False,
    error: type[ValueError] = ValueError,
) -> float:
    """``value`` as a finite number in ``[low, high]`` (``(low, high]`` with ``low_open``); ``integer``:
    a whole number (YAML int). Booleans, strings, inf, nan and numbers outside the range raise ``error``:
    ``<key>: must be a number >= <low> and <= <high> (<unit>), got <value>``."""
    kind = "a whole number" if integer else "a number"
    span = f"{'>' if low_open else '>='} {_show(low)} and <= {_show(high)}"
    reason = f"{key}: must be {kind} {span}{f' ({unit})' if unit else ''}, got {value!r}"
    if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
        raise error(reason)
    try:
        f = float(value)  # a 400-digit YAML int overflows here
    except OverflowError:
        raise error(reason) from None
    if not math.isfinite(f) or f < low or f > high or (low_open and f == low):
        raise error(reason)
    return f


def _show(x: float) -> str:
    """2592000 rather than 2.592e+06: bounds are read by people editing a config file."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def finite(value: Any, key: str, error: type[ValueError] = ValueError) -> float:
    """``value`` as a finite float (any sign): a threshold compared in PromQL. inf/nan raise ``error``."""
    reason = f"{key}: must be a finite number, got {value!r}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(reason)
    try:
        f = float(value)
    except OverflowError:
        raise error(reason) from None
    if not math.isfinite(f):
        raise error(reason)
    return f


def http_url(value: Any, key: str, error: type[ValueError] = ValueError) -> str:
    """``value`` as an absolute ``http://`` or ``https://`` URL with a host, and no whitespace or control
    characters (a URL lands in links, headers and request lines). Anything else raises ``error``."""
    if not isinstance(value, str) or not value:
        raise error(f"{key}: must be an http:// or https:// URL, got {value!r}")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise error(f"{key}: must be an http:// or https:// URL without spaces or control characters")
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise error(f"{key}: {value!r} is not a URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise error(f"{key}: must be an http:// or https:// URL with a host, got {value!r}")
    return value


def header_name(value: Any, key: str, error: type[ValueError] = ValueError) -> str:
    """``value`` as an HTTP field name (an RFC 9110 token: letters, digits, ``!#$%&'*+-.^_`|~``)."""
    if not isinstance(value, str) or not _TOKEN.match(value):
        raise error(f"{key}: {value!r} is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)")
    return value


def header_value(value: Any, key: str, error: type[ValueError] = ValueError) -> str:
    """``value`` as an HTTP field value: a string without CR, LF, NUL or other control characters (HTAB
    allowed). A CR/LF would make every response that carries the header fail."""
    if not isinstance(value, str):
        raise error(f"{key}: must be a string, got {type(value).__name__}")
    bad = _FIELD_VALUE_BAD.search(value)
    if bad:
        raise error(
            f"{key}: an HTTP header value may not hold control characters (found {bad.group()!r} at "
            f"offset {bad.start()})"
        )
    return value


def secret_text(path: Path, key: str, error: type[ValueError] = ValueError) -> str:
    """The stripped text of a token/secret/URL file. Unreadable, not UTF-8 or empty (only whitespace)
    raises ``error``: an empty file would silently mean "no token" or "unsigned"."""
    text = config_text(path, key, error).strip()
    if not text:
        raise error(f"{key}: {path} is empty")
    return text
