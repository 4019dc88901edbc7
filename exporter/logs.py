"""Log output of every ``xpuwatch`` subcommand: ``--log.level`` / ``--log.format`` (logfmt|json), as
exporter-toolkit's promlog flags, with $XPUWATCH_LOG_LEVEL / $XPUWATCH_LOG_FORMAT as fallbacks.

Line shapes (go-kit logfmt, as Prometheus components print)::

    ts=2026-12-01T20:00:00.123Z level=info logger=xpuwatch.exporter.cli msg="listening on http://:9851/metrics"
    {"ts": "2026-12-01T20:00:00.123Z", "level": "info", "logger": "xpuwatch.exporter.cli", "msg": "listening ..."}

Also the one shape of a bad-configuration report shared by exporter, relay and remediation:
``xpuwatch: config error: <key>: <reason>`` on stderr, exit status 2.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import TextIO

LEVELS = ("debug", "info", "warn", "error")
FORMATS = ("logfmt", "json")
LEVEL_ENV = "XPUWATCH_LOG_LEVEL"
FORMAT_ENV = "XPUWATCH_LOG_FORMAT"
CONFIG_ERROR_STATUS = 2

_PY_LEVEL = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
_NAME = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error"}


class LogSettingsError(ValueError):
    """A log level or format that is not one of LEVELS / FORMATS (message names the flag or variable)."""


def _timestamp(record: logging.LogRecord) -> str:
    t = time.gmtime(record.created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, str]:
    out = {
        "ts": _timestamp(record),
        "level": _NAME.get(record.levelno, "error" if record.levelno > logging.ERROR else "debug"),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    if record.exc_info:
        out["err"] = logging.Formatter().formatException(record.exc_info)
    return out


def _logfmt_value(v: str) -> str:
    if v and not any(c in v for c in ' ="\\\n\t'):
        return v
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs; values with spaces, quotes or newlines are quoted and escaped."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), ensure_ascii=False)


def resolve(flag_level: str | None, flag_format: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """(level, format): the flag when given, else the environment variable, else info / logfmt.

    ``warning`` is accepted for ``warn`` (the old ``--log-level`` spelling). Raises LogSettingsError.
    """
    level = (flag_level or env.get(LEVEL_ENV) or "info").lower()
    level = "warn" if level == "warning" else level
    fmt = (flag_format or env.get(FORMAT_ENV) or "logfmt").lower()
    if level not in LEVELS:
        where = "--log.level" if flag_level else LEVEL_ENV
        raise LogSettingsError(f"{where}: {level!r} is not one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        where = "--log.format" if flag_format else FORMAT_ENV
        raise LogSettingsError(f"{where}: {fmt!r} is not one of {', '.join(FORMATS)}")
    return level, fmt


def configure(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Install one stderr handler on the root logger with the chosen level and format."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(_PY_LEVEL[level])


def config_error(message: object) -> int:
    """Report a bad configuration the same way in every service; returns the exit status (2)."""
    print(f"xpuwatch: config error: {message}", file=sys.stderr, flush=True)
    return CONFIG_ERROR_STATUS
