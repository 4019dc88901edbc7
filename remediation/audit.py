"""Audit trail: one JSON line per decision, refusal and step outcome (append-only file or stdout)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from .progress import stamp

_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return stamp(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class Audit:
    """Writes records ``{"ts", "event", ...fields}``; ``records`` keeps them in memory for tests."""

    def __init__(self, path: str | Path | None = None, keep: bool = False) -> None:
        self._path = Path(path) if path else None
        self._stream: TextIO | None = None
        self.records: list[dict[str, Any]] | None = [] if keep else None

    def write(self, now: datetime, event: str, **fields: Any) -> dict[str, Any]:
        rec = {"ts": stamp(now), "event": event, **{k: _plain(v) for k, v in fields.items()}}
        line = json.dumps(rec, sort_keys=True, ensure_ascii=False)
        if self._path is not None:  # appended, never through a symbolic link planted at the path (ELOOP)
            fd = os.open(self._path, _APPEND, 0o666)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        else:
            (self._stream or sys.stdout).write(line + "\n")
        if self.records is not None:
            self.records.append(rec)
        return rec
