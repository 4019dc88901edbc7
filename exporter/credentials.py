"""Inbound credentials (HTTP edge of the exporter, the relay and the remediation controller): one checker.

Why it lives here: ``exporter`` is the lowest layer that ``alerts`` and ``remediation`` already import
(``exporter.catalog``, ``exporter.settings.parse_listen_address``); this module imports nothing from any
xpuwatch package (only the standard library and ``bcrypt``), so each component imports it without pulling
in the others.

What it guarantees (issue 13 item 5, issue 14 item 4):

- Basic auth passwords may be bcrypt hashes (``$2a$``/``$2b$``/``$2y$``, as exporter-toolkit's
  ``basic_auth_users`` and ``htpasswd -nB`` write them) or plain text (compared with
  ``hmac.compare_digest``). Bearer tokens are compared in constant time.
- bcrypt runs OFF the event loop, in a small thread pool of ``workers`` threads (bcrypt releases the GIL),
  and at most ``workers + queue`` verifications are admitted at once: beyond that a check answers
  ``Verdict.BUSY`` at once (callers answer 503, which Prometheus and Alertmanager retry) instead of queueing,
  so a flood of wrong passwords costs at most ``workers`` cores and never stalls ``/healthz`` or ``/metrics``.
- A verified credential is remembered in a bounded LRU (``cache_size`` entries) keyed by an HMAC (random
  per-process key) of user, password and stored hash: only a verification that SUCCEEDED inserts, so a wrong
  password never hits the cache and always pays bcrypt's full cost; a right one pays it once (exporter-toolkit
  caches the same way, ``web/cache.go``).
- Unknown user names cost the same as known ones: they are checked against a dummy hash of the same bcrypt
  cost as the configured hashes, so timing does not reveal which user names exist.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hashlib
import hmac
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import bcrypt

DEFAULT_WORKERS = 2
"""Threads verifying bcrypt at once: each costs one core for ~50-250 ms (cost 10-12)."""
DEFAULT_QUEUE = 16
"""Verifications that may wait for a thread; beyond that, ``Verdict.BUSY``."""
DEFAULT_CACHE_SIZE = 256
"""Verified (user, password) pairs remembered."""

BCRYPT_HASH = re.compile(r"^\$2[aby]?\$(\d\d)\$[./A-Za-z0-9]{53}$")


class Verdict(enum.Enum):
    """The outcome of one check: OK, DENIED (answer 401) or BUSY (answer 503: too many checks running)."""

    OK = "ok"
    DENIED = "denied"
    BUSY = "busy"


def is_bcrypt_hash(value: str | bytes) -> bool:
    """True when ``value`` has the shape of a bcrypt hash (``$2y$10$`` + 53 characters)."""
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    return BCRYPT_HASH.match(text.strip()) is not None


@dataclass(frozen=True)
class Secret:
    """One user's stored password: a bcrypt hash (``hashed``) or the plain text."""

    value: bytes
    hashed: bool

    @classmethod
    def hash(cls, value: str | bytes) -> Secret:
        raw = value.strip().encode() if isinstance(value, str) else value.strip()
        # Go's bcrypt writes $2y$; the C implementation behind `bcrypt` treats 2y like 2b.
        if raw.startswith(b"$2y$"):
            raw = b"$2b$" + raw[4:]
        return cls(raw, True)

    @classmethod
    def plain(cls, value: str | bytes) -> Secret:
        return cls(value.encode() if isinstance(value, str) else value, False)


class Authenticator:
    """Checks ``Authorization`` headers against basic-auth users and/or a bearer token.

    ``users``: user name -> Secret. ``bearer_token``: accepted as ``Bearer <token>`` (None: not accepted).
    With neither configured every request is allowed (callers decide whether that is permitted at all).
    ``check(header)`` is a coroutine and must be awaited on the event loop that serves requests.
    """

    def __init__(
        self,
        users: Mapping[str, Secret] | None = None,
        bearer_token: str | None = None,
        workers: int = DEFAULT_WORKERS,
        queue: int = DEFAULT_QUEUE,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self._users = dict(users or {})
        self._bearer = bearer_token.encode() if bearer_token else None
        self._key = os.urandom(32)
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._admitted = 0
        self._limit = workers + queue
        self._executor: ThreadPoolExecutor | None = None
        self._workers = workers
        self.verifications = 0  # bcrypt verifications run (tests, metrics)
        self.busy = 0  # checks refused because too many were running
        costs = [c for s in self._users.values() if s.hashed for c in [_cost(s.value)] if c is not None]
        # The dummy costs what the most expensive configured hash costs: unknown users are not faster.
        self._dummy = bcrypt.hashpw(b"not-a-user", bcrypt.gensalt(max(costs) if costs else 4))
        self._dummy_plain = os.urandom(16)

    @property
    def enabled(self) -> bool:
        return bool(self._users) or self._bearer is not None

    async def check(self, header: str | None) -> Verdict:
        """Verdict for one ``Authorization`` header value (None or "" when absent)."""
        if not self.enabled:
            return Verdict.OK
        scheme, _, cred = (header or "").partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer" and self._bearer is not None:
            ok = hmac.compare_digest(cred.strip().encode(), self._bearer)
            return Verdict.OK if ok else Verdict.DENIED
        if scheme == "basic" and self._users:
            try:
                user, _, password = base64.b64decode(cred.strip(), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return Verdict.DENIED
            return await self.check_basic(user, password)
        return Verdict.DENIED

    async def check_basic(self, user: str, password: str) -> Verdict:
        """Verdict for a user name and password (bcrypt off the loop; bounded; cached when right)."""
        secret = self._users.get(user)
        pw = password.encode()
        if secret is not None and not secret.hashed:
            ok = hmac.compare_digest(pw, secret.value)
            return Verdict.OK if ok else Verdict.DENIED
        if secret is None and not any(s.hashed for s in self._users.values()):
            hmac.compare_digest(pw, self._dummy_plain)  # same work as a known plain-text user
            return Verdict.DENIED
        stored = secret.value if secret is not None else self._dummy
        key = hmac.new(self._key, b"\0".join((user.encode(), pw, stored)), hashlib.sha256).digest()
        if secret is not None:
            with self._lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    return Verdict.OK
        with self._lock:
            if self._admitted >= self._limit:
                self.busy += 1
                return Verdict.BUSY
            self._admitted += 1
        try:
            ok = await asyncio.get_running_loop().run_in_executor(self._pool(), _verify, pw, stored)
        finally:
            with self._lock:
                self._admitted -= 1
                self.verifications += 1
        if not ok or secret is None:
            return Verdict.DENIED
        with self._lock:
            self._cache[key] = None
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return Verdict.OK

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._workers, thread_name_prefix="xpuwatch-bcrypt")
            return self._executor

    def close(self) -> None:
        """Stop the verification threads (pending checks are cancelled)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


def _cost(hashed: bytes) -> int | None:
    m = BCRYPT_HASH.match(hashed.decode("ascii", "replace"))
    return int(m.group(1)) if m else None


def _verify(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # a malformed stored hash never verifies
        return False
