"""Poller: reads every backend in the background and keeps its last good snapshot for the collector.

Each backend gets a supervisor thread (its schedule) and a worker thread (the only thread that ever calls
into the backend), so there are never two calls into one backend at once. A call that outlives its
``timeout`` is counted as an error with reason ``timeout`` and the backend is marked down; the supervisor
starts no other call until that one returns (re-checking every 0.5 s), and discards its late result.

Staleness bound: a backend's devices are served from its last successful poll for at most
``2 * interval + timeout`` seconds (override with ``stale_after``); past that they are not served at all and
``xpuwatch_backend_up`` is 0. ``xpuwatch_backend_up`` is also 0 as soon as a poll fails or times out.

A scrape never calls a backend: it reads ``Poller.view(now)``, an immutable value.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from xpuwatch.exporter.plausibility import describe, implausible
from xpuwatch.vendors.base import Backend, BackendError, DeviceSample

log = logging.getLogger(__name__)
MAX_IMPLAUSIBLE_LOGGED = 4096
"""(device, reason) pairs remembered as logged: bounded, a fleet of churning uuids cannot grow it."""

OPEN_BACKOFF_INITIAL_SECONDS = 1.0
OPEN_BACKOFF_MAX_SECONDS = 300.0
STUCK_RECHECK_SECONDS = 0.5
REIDENTIFY_MAX_SECONDS = 3600.0
# Reasons the poller itself assigns: exported at 0 from the start so that increase() sees the first error.
POLLER_REASONS = ("timeout", "unexpected", "field")


@dataclass(frozen=True)
class PollSettings:
    """How one backend is polled. All durations in seconds."""

    interval: float = 5.0
    """Time between the start of two polls."""
    timeout: float = 10.0
    """A call into the backend (open or sample) running longer than this counts as failed (reason timeout)."""
    stale_after: float | None = None
    """Serve the last good snapshot at most this long after it was taken; None = 2 * interval + timeout."""
    supplement: bool = False
    """The backend's samples overlay other backends' samples of the same device (BackendSpec.supplement)."""
    reidentify_after: float = 60.0
    """While a device reads as lost (``up`` False), close and re-open the backend at most this often, so a
    GPU that comes back or is swapped for another is identified again without a restart (most backends
    enumerate devices in ``open``). 60 s: a re-open costs one enumeration (NVML init, one tool call)."""

    @property
    def staleness_bound(self) -> float:
        return self.stale_after if self.stale_after is not None else 2 * self.interval + self.timeout


@dataclass(frozen=True)
class BackendView:
    """What the collector renders for one backend at one instant.

    ``samples`` is empty when the data is stale (past the staleness bound) or was never read.
    ``generation`` increases whenever a poll completes (success or failure), for render caching.
    """

    backend: str
    up: bool
    samples: tuple[DeviceSample, ...]
    devices: int  # devices in the last good snapshot, served or not
    last_success: float | None  # Unix time (injected clock) of the last successful poll
    poll_duration: float | None  # seconds, of the last completed poll
    errors: Mapping[str, int]  # reason -> count since start
    generation: int
    fresh: bool
    supplement: bool = False

    @property
    def cache_key(self) -> tuple[Any, ...]:
        return (self.backend, self.generation, self.fresh, self.up)


class _Worker:
    """A daemon thread that runs one callable at a time: the only thread that touches one backend."""

    def __init__(self, name: str) -> None:
        self._cv = threading.Condition()
        self._job: tuple[Callable[[], Any], Future[Any]] | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        fut: Future[Any] = Future()
        with self._cv:
            if self._job is not None:
                raise RuntimeError("worker busy")  # the supervisor never does this
            self._job = (fn, fut)
            self._cv.notify()
        return fut

    def _loop(self) -> None:
        while True:
            with self._cv:
                while self._job is None:
                    self._cv.wait()
                fn, fut = self._job
            try:
                outcome: tuple[bool, Any] = (True, fn())
            except BaseException as exc:
                outcome = (False, exc)
            # Free the slot before the future resolves: the supervisor submits the next call as soon as it
            # sees this one done (a timed-out call returning late), and a slot still taken then was "worker
            # busy" raised in the poller's thread, which ended it: the backend was never polled again.
            with self._cv:
                self._job = None
            if outcome[0]:
                fut.set_result(outcome[1])
            else:
                fut.set_exception(outcome[1])


class BackendPoller:
    """Polls one backend: open with exponential backoff, then sample every ``interval``.

    ``clock`` gives Unix time (timestamps, staleness); ``monotonic`` measures poll durations. Both are
    injected so tests and the golden file run on a fixed clock. ``on_update`` is called (from the poller's
    thread) after every completed poll.
    """

    def __init__(
        self,
        backend: Backend,
        settings: PollSettings,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        on_update: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        self.name = backend.name
        self.settings = settings
        self._clock = clock
        self._monotonic = monotonic
        self._on_update = on_update
        self._lock = threading.Lock()
        self._samples: tuple[DeviceSample, ...] = ()
        self._last_success: float | None = None
        self._last_ok = False
        self._poll_duration: float | None = None
        self._errors: dict[str, int] = dict.fromkeys(POLLER_REASONS, 0)
        self._errors_view: Mapping[str, int] = MappingProxyType(dict(self._errors))
        self._generation = 0
        self._opened = False
        self._open_failures = 0
        self._in_flight_since: float | None = None  # monotonic start of a call still running
        self._pending: Future[Any] | None = None  # a call that timed out and has not returned yet
        self._opened_at = 0.0  # monotonic time of the last successful open
        self._reopen = False  # a device is lost: re-open (re-identify) before the next sample
        self._reid_delay = settings.reidentify_after
        self._reid_lost: frozenset[str] = frozenset()
        self._worker = _Worker(f"xpuwatch-{self.name}-worker")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._implausible_logged: set[tuple[str, str]] = set()  # (uuid, reason) already logged

    # -- reading (any thread) ------------------------------------------------------------------------

    def view(self, now: float) -> BackendView:
        """The backend's state at ``now`` (Unix time): fresh samples or none, up, counters."""
        with self._lock:
            fresh = (
                self._last_success is not None and now - self._last_success <= self.settings.staleness_bound
            )
            stuck = (
                self._in_flight_since is not None
                and self._monotonic() - self._in_flight_since > self.settings.timeout
            )
            return BackendView(
                backend=self.name,
                up=self._last_ok and fresh and not stuck,
                samples=self._samples if fresh else (),
                devices=len(self._samples),
                last_success=self._last_success,
                poll_duration=self._poll_duration,
                errors=self._errors_view,
                generation=self._generation,
                fresh=fresh,
                supplement=self.settings.supplement,
            )

    # -- polling (supervisor thread, or a test calling poll_once) ------------------------------------

    def poll_once(self) -> float:
        """One cycle: open if needed, else sample. Blocks at most ``timeout``. While a timed-out call is
        still running, starts nothing and returns a short delay. Returns the delay before the next cycle."""
        if self._pending is not None:
            if not self._pending.done():
                return min(self.settings.interval, STUCK_RECHECK_SECONDS)
            self._pending = None
            with self._lock:
                started, self._in_flight_since = self._in_flight_since, None
            log.warning(
                "backend %s: hung call returned after %.1fs; result discarded",
                self.name,
                self._monotonic() - (started or 0.0),
            )
        if self._opened and self._reopen:
            self._reopen = False
            log.info("backend %s: a device is lost; re-opening to identify devices again", self.name)
            self._call(self.backend.close, opening=True)
            self._opened = False
        if not self._opened:
            ok = self._call(self.backend.open, opening=True)
            if ok is _FAILED:
                self._open_failures += 1
                delay = min(
                    OPEN_BACKOFF_INITIAL_SECONDS * 2 ** (self._open_failures - 1), OPEN_BACKOFF_MAX_SECONDS
                )
                log.warning("backend %s: open failed, retrying in %.0fs", self.name, delay)
                return delay
            self._opened = True
            self._opened_at = self._monotonic()
            self._open_failures = 0
            log.info("backend %s: opened", self.name)
        samples = self._call(self.backend.sample, opening=False)
        if samples is not _FAILED:
            lost = frozenset(sample.device.uuid for sample in samples if not sample.up)
            if not lost:
                self._reid_delay = self.settings.reidentify_after
            elif self._monotonic() - self._opened_at >= self._reid_delay:
                self._reopen = True
                # The same devices still lost after a re-open (a GPU gone for good, kept visible as lost):
                # re-open less and less often, up to hourly.
                if lost == self._reid_lost:
                    self._reid_delay = min(2 * self._reid_delay, REIDENTIFY_MAX_SECONDS)
                self._reid_lost = lost
        return self.settings.interval

    def _call(self, fn: Callable[[], Any], opening: bool) -> Any:
        started = self._monotonic()
        fut = self._worker.submit(fn)
        with self._lock:
            self._in_flight_since = started
        wait = self.settings.timeout
        try:
            result = fut.result(timeout=wait)
        except TimeoutError:
            self._pending = fut  # no new call until this one returns
            self._record_failure("timeout", self._monotonic() - started)
            log.warning("backend %s: no answer within %gs; no new call until it returns", self.name, wait)
            return _FAILED
        except BackendError as exc:
            with self._lock:
                self._in_flight_since = None
            self._record_failure(exc.reason or "error", self._monotonic() - started)
            log.warning("backend %s: %s (%s)", self.name, exc, exc.reason)
            return _FAILED
        except Exception as exc:
            with self._lock:
                self._in_flight_since = None
            self._record_failure("unexpected", self._monotonic() - started)
            log.exception("backend %s: unexpected error: %s", self.name, exc)
            return _FAILED
        duration = self._monotonic() - started
        with self._lock:
            self._in_flight_since = None
        if opening:
            return True
        try:
            samples = _check_samples(result)
        except TypeError as exc:
            self._record_failure("unexpected", duration)
            log.error("backend %s: %s", self.name, exc)
            return _FAILED
        unread = sum(len(s.unread) for s in samples)
        self._log_implausible(samples)
        with self._lock:
            if unread:
                self._errors["field"] = self._errors.get("field", 0) + unread
                self._errors_view = MappingProxyType(dict(self._errors))
            self._samples = samples
            self._last_success = self._clock()
            self._last_ok = True
            self._poll_duration = duration
            self._generation += 1
        self._notify()
        return samples

    def _log_implausible(self, samples: Sequence[DeviceSample]) -> None:
        """Log each (device, reason) of ``exporter.plausibility`` once per exporter run: the values stay
        exported as printed and counted in ``xpuwatch_implausible_readings``; the log says which they are."""
        for s in samples:
            for reason, _ in implausible(s):
                key = (s.device.uuid, reason)
                if key in self._implausible_logged or len(self._implausible_logged) >= MAX_IMPLAUSIBLE_LOGGED:
                    continue
                self._implausible_logged.add(key)
                log.warning(
                    "backend %s: device %s (%s) reads %s (%s): exported as printed, counted in "
                    "xpuwatch_implausible_readings",
                    self.name,
                    s.device.index,
                    s.device.uuid,
                    reason,
                    describe(s, reason),
                )

    def _record_failure(self, reason: str, duration: float) -> None:
        with self._lock:
            self._errors[reason] = self._errors.get(reason, 0) + 1
            self._errors_view = MappingProxyType(dict(self._errors))
            self._last_ok = False
            self._poll_duration = duration
            self._generation += 1
        self._notify()

    def _notify(self) -> None:
        if self._on_update is not None:
            try:
                self._on_update()
            except Exception:  # a listener never stops polling
                log.exception("poll listener failed")

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"xpuwatch-{self.name}-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = self._monotonic()
            try:
                delay = self.poll_once()
            except Exception as exc:  # a bug of ours never ends polling: counted, logged, tried again
                self._record_failure("unexpected", self._monotonic() - t0)
                log.exception("backend %s: poll cycle failed: %s", self.name, exc)
                delay = self.settings.interval
            self._stop.wait(max(0.0, delay - (self._monotonic() - t0)))

    def halt(self) -> None:
        """Start no further poll cycle (a cycle under way finishes its current call; returns at once)."""
        self._stop.set()

    def stop(self, join_timeout: float = 1.0) -> None:
        """Stop polling and close the backend if no call is stuck in it (close never raises). Waits at most
        ``join_timeout`` seconds for the cycle under way."""
        self._stop.set()
        with self._lock:
            stuck = self._in_flight_since is not None
        if self._thread is not None:
            self._thread.join(timeout=join_timeout)
        if self._opened and not stuck:
            try:
                self.backend.close()
            except Exception:
                log.exception("backend %s: close failed", self.name)


_FAILED = object()


def _check_samples(result: Any) -> tuple[DeviceSample, ...]:
    if not isinstance(result, Sequence) or not all(isinstance(s, DeviceSample) for s in result):
        raise TypeError(f"sample() returned {type(result).__name__}, not a sequence of DeviceSample")
    return tuple(result)


@dataclass
class Poller:
    """All backends' pollers. ``view(now)`` is what one render reads; ``generation`` counts updates."""

    pollers: list[BackendPoller] = field(default_factory=list)
    listeners: list[Callable[[], None]] = field(default_factory=list)

    def add(
        self,
        backend: Backend,
        settings: PollSettings,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> BackendPoller:
        p = BackendPoller(backend, settings, clock, monotonic, on_update=self._updated)
        self.pollers.append(p)
        return p

    def _updated(self) -> None:
        for fn in list(self.listeners):
            fn()

    def view(self, now: float) -> tuple[BackendView, ...]:
        return tuple(p.view(now) for p in self.pollers)

    def ready(self, now: float) -> tuple[bool, list[str]]:
        """True when every backend has fresh data (a successful poll within its staleness bound); else the
        names of those without."""
        missing = [v.backend for v in self.view(now) if not v.fresh]
        return (not missing and bool(self.pollers)), missing

    def start(self) -> None:
        for p in self.pollers:
            p.start()

    def halt(self) -> None:
        """No poller starts another cycle (the first step of shutdown; returns at once)."""
        for p in self.pollers:
            p.halt()

    def stop(self, wait: float = 1.0) -> None:
        """Halt every poller, then join them and close their backends within ``wait`` seconds in all."""
        self.halt()
        deadline = time.monotonic() + wait
        for p in self.pollers:
            p.stop(join_timeout=max(0.0, deadline - time.monotonic()))
