"""Ascend backend (I/O edge): polls npu-smi or libdcmi, keeps fault counts and lost chips; the one registration."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from xpuwatch.vendors.ascend.card_report import parse_card_report, parse_health
from xpuwatch.vendors.ascend.dcmi import blocks_from_reading, health_from_reading, row_from_reading
from xpuwatch.vendors.ascend.info_table import parse_info_table
from xpuwatch.vendors.ascend.libdcmi import ChipReading, Dcmi
from xpuwatch.vendors.ascend.libdcmi import find_library as find_dcmi_library
from xpuwatch.vendors.ascend.records import (
    AICORE_FREQ,
    AICORE_RATED_FREQ,
    AICPU,
    BACKEND,
    CARD_POWER,
    CTRLCPU,
    DDR_BANDWIDTH,
    HEALTH_STATE,
    MAX_FAULT_CODES,
    METRICS,
    OVERFLOW_CODE,
    STANDARD_PATHS,
    TOOL,
    UNSUPPORTED_AFTER,
    VECTORCORE,
    VENDOR,
    CardReport,
    ChipRow,
    HealthReport,
    InfoTable,
)
from xpuwatch.vendors.ascend.samples import FORMATS, card_power, device_of, health_level, sample_chip
from xpuwatch.vendors.ascend.vnpu import VnpuReport, parse_vnpu_info, vnpu_slices
from xpuwatch.vendors.base import BackendError, Device, DeviceSample, ParseError
from xpuwatch.vendors.command import CommandRunner, SubprocessRunner
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, register

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------------
# The backend (I/O edge)

SOURCES = ("cli", "dcmi", "auto")

# Readings each detail query is the source of: a failed query leaves these unread (DeviceSample.unread).
_DETAIL_READINGS: dict[str, tuple[str, ...]] = {
    "usages": (
        "memory_bandwidth_utilization_ratio",
        AICPU.name,
        CTRLCPU.name,
        VECTORCORE.name,
        DDR_BANDWIDTH.name,
    ),
    "common": (AICORE_FREQ.name, AICORE_RATED_FREQ.name),
}


@dataclass(frozen=True)
class _Query:
    """One detail query: ``npu-smi info -t <kind> -i <npu> [-c <chip>]`` (chip None: a per-card query)."""

    kind: str  # usages | common | health | info-vnpu
    npu: int
    chip: int | None

    @property
    def key(self) -> tuple[str, int, int | None]:
        return (self.kind, self.npu, self.chip)


@dataclass(frozen=True)
class _Cached:
    value: object
    at: float  # monotonic time of the answer


def _flag(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


@dataclass(frozen=True)
class AscendOptions:
    """The ``ascend`` section of the config file.

    ``source``: ``auto`` (default: DCMI when libdcmi.so loads, else npu-smi), ``cli`` (npu-smi only) or
    ``dcmi`` (libdcmi.so through ctypes; fails to open without it). ``dcmi_library``: path of libdcmi.so
    (default: the driver's install paths, then the loader's search). ``npu_smi``: path or name of the tool.
    ``timeout_seconds``: per npu-smi call. ``poll_budget_seconds``: all calls of one poll together; keep it
    below the poller's timeout for this backend (default 2 x the 10 s interval). A detail query that fails
    or is not answered in time costs its readings (``unread``), never the chip: only a chip missing from
    ``npu-smi info`` is lost. ``card_queries``: run ``-t usages`` and ``-t common`` per card (bandwidth, AI
    CPU/ctrl CPU, clocks, 310P card power). ``vnpu``: run ``-t info-vnpu`` per chip (vNPU slices).
    ``detail_queries_per_poll``: detail calls per poll besides ``npu-smi info``, run concurrently; health
    queries of chips that are not OK come first, the rest rotate over cards and chips, so a poll costs at
    most 1 + this many forks whatever the chip count. ``detail_max_age_seconds``: a detail reading older
    than this is dropped (no series) until the rotation reads it again.
    """

    source: str = "auto"
    dcmi_library: str | None = None
    npu_smi: str = TOOL
    timeout_seconds: float = 8.0
    poll_budget_seconds: float = 15.0
    card_queries: bool = True
    vnpu: bool = True
    detail_queries_per_poll: int = 4
    detail_max_age_seconds: float = 300.0

    @classmethod
    def from_mapping(cls, opts: Mapping[str, object]) -> AscendOptions:
        """Raises BackendError(reason="config") on a bad value."""
        o = cls()
        try:
            out = replace(
                o,
                source=str(opts.get("source", o.source)).strip().lower(),
                dcmi_library=str(opts["dcmi_library"]) if opts.get("dcmi_library") else None,
                npu_smi=str(opts.get("npu_smi", o.npu_smi)),
                timeout_seconds=float(opts.get("timeout_seconds", o.timeout_seconds)),  # type: ignore[arg-type]
                poll_budget_seconds=float(opts.get("poll_budget_seconds", o.poll_budget_seconds)),  # type: ignore[arg-type]
                card_queries=_flag(opts.get("card_queries", o.card_queries)),
                vnpu=_flag(opts.get("vnpu", o.vnpu)),
                detail_queries_per_poll=int(opts.get("detail_queries_per_poll", o.detail_queries_per_poll)),  # type: ignore[call-overload]
                detail_max_age_seconds=float(opts.get("detail_max_age_seconds", o.detail_max_age_seconds)),  # type: ignore[arg-type]
            )
        except (TypeError, ValueError) as exc:
            raise BackendError(f"ascend options: {exc}", reason="config") from exc
        if out.source not in SOURCES:
            raise BackendError(f"ascend options: source must be one of {', '.join(SOURCES)}", reason="config")
        if not (out.timeout_seconds > 0 and out.poll_budget_seconds > 0 and out.detail_max_age_seconds > 0):
            raise BackendError("ascend options: timeouts and ages must be > 0", reason="config")
        if not 0 <= out.detail_queries_per_poll <= 64:
            raise BackendError("ascend options: detail_queries_per_poll must be 0..64", reason="config")
        return out


def _runner_fallback_path(runner: CommandRunner) -> str | None:
    # Only a live runner (or a recorder around one) may look at this machine's driver install paths.
    inner = getattr(runner, "inner", runner)
    if isinstance(inner, SubprocessRunner):
        return next((p for p in STANDARD_PATHS if os.access(p, os.X_OK)), None)
    return None


class AscendBackend:
    """Polls the chips through npu-smi (the injected CommandRunner) or libdcmi.so.

    npu-smi, per poll: ``npu-smi info`` (failure -> BackendError: nothing could be read), then at most
    ``detail_queries_per_poll`` detail queries run concurrently (the first poll runs all of them, that many
    at a time): ``-t health -i N -c C`` for chips whose Health
    is not OK (oldest read first), then the next ones of a rotation over ``-t usages -i N``, ``-t common -i N``
    and ``-t info-vnpu -i N -c C``. Every chip the table lists is up: a detail query that fails (timeout,
    exit status, "Invalid card id.", garbage, poll budget spent) leaves that query's readings unread with the
    reason (counted in ``xpuwatch_backend_errors_total{reason="field"}``) and is logged once per query and
    cause; one that never answered is dropped after UNSUPPORTED_AFTER tries. Answers are cached and used
    until ``detail_max_age_seconds``. DCMI, per poll: the card list (failure -> BackendError), then every
    chip's readings: a chip the card list names is up; a failed call leaves its readings unread (health:
    ``health`` and ``fault_events``), and the chip is lost only when none of its calls answers.
    Chips seen before but missing now are lost. Error codes are counted per chip: +1 each time a code
    appears that was not active at the previous read (both sources list active codes, not events).
    """

    name = BACKEND

    def __init__(
        self,
        runner: CommandRunner,
        options: AscendOptions,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._runner = runner
        self._opts = options
        self._monotonic = monotonic
        self._tool = options.npu_smi
        self._dcmi: Dcmi | None = None
        self._known: dict[str, Device] = {}
        self._bus_ids: dict[tuple[int, int], str] = {}
        self._active_codes: dict[str, frozenset[str]] = {}
        self._answered: set[tuple[str, int, int | None]] = set()  # detail queries that answered at least once
        self._unsupported: dict[tuple[str, int, int | None], int] = {}  # failures before any answer
        self._cache: dict[tuple[str, int, int | None], _Cached] = {}  # last answer per detail query
        self._cursor = 0  # rotation position over the detail queries
        self._swept = False  # the first poll's full read is done
        self._logged: set[tuple[tuple[str, int, int | None], str]] = set()  # (query, reason) warned about
        self._fault_counts: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        """ "dcmi" or "cli": what ``open`` settled on."""
        return "dcmi" if self._dcmi is not None else "cli"

    @property
    def forks_per_poll_max(self) -> int:
        """npu-smi calls one poll makes at most (the table + the detail budget)."""
        return 1 + self._opts.detail_queries_per_poll

    def open(self) -> None:
        if self._opts.source in ("dcmi", "auto"):
            path = find_dcmi_library(self._opts.dcmi_library)
            if path is not None:
                try:
                    self._dcmi = Dcmi(path)
                    return
                except BackendError as exc:
                    if self._opts.source == "dcmi":
                        raise
                    log.warning("ascend: %s; using %s instead", exc, self._opts.npu_smi)
            elif self._opts.source == "dcmi":
                raise BackendError("libdcmi.so not found", reason="not_found")
        found = self._runner.which(self._opts.npu_smi) or _runner_fallback_path(self._runner)
        if found is None:
            raise BackendError(f"{self._opts.npu_smi}: not found", reason="not_found")
        self._tool = found

    def close(self) -> None:
        return None  # DCMI has no documented teardown; npu-smi calls hold nothing between polls

    def sample(self) -> Sequence[DeviceSample]:
        with self._lock:
            out = self._sample_dcmi() if self._dcmi is not None else self._sample_cli()
            seen = {s.device.index for s in out}
            for s in out:
                self._known[s.device.index] = s.device
            for index, dev in sorted(self._known.items()):
                if index not in seen:
                    where = "the DCMI card list" if self._dcmi is not None else "npu-smi info"
                    out.append(DeviceSample.lost(dev, f"missing from {where}"))
            return out

    def _count_faults(self, uuid: str, active: frozenset[str]) -> dict[str, int]:
        counts = self._fault_counts.setdefault(uuid, {})
        for code in sorted(active - self._active_codes.get(uuid, frozenset())):
            key = code if code in counts or len(counts) < MAX_FAULT_CODES else OVERFLOW_CODE
            counts[key] = counts.get(key, 0) + 1
        self._active_codes[uuid] = active
        return counts

    # ---- npu-smi

    def _run(self, args: Sequence[str], deadline: float) -> str:
        left = deadline - self._monotonic()
        if left <= 0:
            raise BackendError("npu-smi: poll budget exhausted", reason="timeout")
        return self._runner.run([self._tool, *args], min(self._opts.timeout_seconds, left)).stdout

    def _targets(self, table: InfoTable) -> list[_Query]:
        """Every detail query this table calls for, in rotation order (health first: faults matter most)."""
        cards = sorted({c.npu_id for c in table.chips})
        health = [_Query("health", c.npu_id, c.chip_id) for c in table.chips if health_level(c.health) != 0]
        health.sort(key=lambda q: self._cache.get(q.key, _Cached(None, -1e18)).at)  # oldest read first
        rotation: list[_Query] = []
        if self._opts.card_queries:
            rotation += [_Query(kind, n, None) for n in cards for kind in ("usages", "common")]
        if self._opts.vnpu:
            rotation += [_Query("info-vnpu", c.npu_id, c.chip_id) for c in table.chips]
        rotation = [q for q in rotation if self._unsupported.get(q.key, 0) < UNSUPPORTED_AFTER]
        budget = max(0, self._opts.detail_queries_per_poll)
        if budget and not self._swept:
            # The first poll reads everything once (still at most `budget` calls at a time), so that every
            # reading exists from the start and a capture bundle holds every query a later poll may run.
            self._swept = True
            return health + rotation
        picked = health[:budget]
        room = budget - len(picked)
        if rotation and room > 0:
            start = self._cursor % len(rotation)
            order = rotation[start:] + rotation[:start]
            picked += order[:room]
            self._cursor = start + min(room, len(rotation))
        return picked

    def _query(self, q: _Query, deadline: float) -> object:
        if q.kind in ("usages", "common"):
            return self._card_report(q.npu, q.kind, deadline)
        args = ["info", "-t", q.kind, "-i", str(q.npu), "-c", str(q.chip)]
        text = self._run(args, deadline)
        return parse_health(text) if q.kind == "health" else parse_vnpu_info(text)

    def _run_queries(
        self, queries: Sequence[_Query], deadline: float
    ) -> dict[tuple[str, int, int | None], str]:
        """Run the picked detail queries concurrently (at most ``detail_queries_per_poll`` at once); cache
        what answered; return what failed: query key -> reason."""
        failed: dict[tuple[str, int, int | None], str] = {}
        if not queries:
            return failed
        workers = max(1, min(len(queries), self._opts.detail_queries_per_poll))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="npu-smi") as pool:
            futures = {q: pool.submit(self._query, q, deadline) for q in queries}
            for q, fut in futures.items():
                try:
                    result = fut.result()
                except BackendError as exc:
                    failed[q.key] = f"{exc.reason}: {exc}"[:200]
                    self._cache.pop(q.key, None)
                    if q.key not in self._answered:
                        self._unsupported[q.key] = self._unsupported.get(q.key, 0) + 1
                    self._log_failure(q, exc)
                    continue
                self._cache[q.key] = _Cached(result, self._monotonic())
                self._answered.add(q.key)
                self._unsupported.pop(q.key, None)
                self._logged = {k for k in self._logged if k[0] != q.key}
        return failed

    def _log_failure(self, q: _Query, exc: BackendError) -> None:
        """One warning per query target and cause until that query answers again."""
        if (q.key, exc.reason) in self._logged or exc.reason == "shutdown":
            return
        self._logged.add((q.key, exc.reason))
        if q.kind == "info-vnpu" and q.key not in self._answered:
            log.debug(
                "ascend: npu-smi info -t info-vnpu -i %d -c %s: %s (no vNPU listing)", q.npu, q.chip, exc
            )
            return
        what = f"npu-smi info -t {q.kind} -i {q.npu}" + ("" if q.chip is None else f" -c {q.chip}")
        log.warning(
            "ascend: %s failed (%s: %s); NPU %d stays up on the npu-smi info readings, its -t %s readings "
            "are unread until the query answers",
            what,
            exc.reason,
            str(exc)[:160],
            q.npu,
            q.kind,
        )

    def _fresh(self, key: tuple[str, int, int | None]) -> object | None:
        hit = self._cache.get(key)
        if hit is None or self._monotonic() - hit.at > self._opts.detail_max_age_seconds:
            return None
        return hit.value

    def _sample_cli(self) -> list[DeviceSample]:
        deadline = self._monotonic() + self._opts.poll_budget_seconds
        table = parse_info_table(self._run(["info"], deadline))
        failed = self._run_queries(self._targets(table), deadline)
        per_card: dict[int, list[int]] = {}
        for c in table.chips:
            per_card.setdefault(c.npu_id, []).append(c.chip_id)
        out: list[DeviceSample] = []
        for row in table.chips:
            out.append(self._sample_row(row, table, per_card[row.npu_id], failed))
        return out

    def _card_report(self, npu: int, kind: str, deadline: float) -> CardReport:
        what = f"npu-smi info -t {kind} -i {npu}"
        rep = parse_card_report(self._run(["info", "-t", kind, "-i", str(npu)], deadline), what)
        if rep.npu_id is not None and rep.npu_id != npu:
            raise ParseError(f"{what}: answered for NPU {rep.npu_id}")
        return rep

    def _sample_row(
        self,
        row: ChipRow,
        table: InfoTable,
        card_chips: Sequence[int],
        failed: Mapping[tuple[str, int, int | None], str],
    ) -> DeviceSample:
        """One chip from the table and the freshest detail reports. A chip the table lists is up: a detail
        report that failed (this poll) leaves its readings unread with the reason; one that is not cached
        (not yet reached by the rotation, or older than detail_max_age_seconds) gives no series."""
        dev = device_of(row, table.version)
        unread: dict[str, str] = {}
        level = health_level(row.health)
        health = None
        if level != 0:
            hkey = ("health", row.npu_id, row.chip_id)
            cached = self._fresh(hkey)
            health = cached if isinstance(cached, HealthReport) else None
            if hkey in failed:
                unread["fault_events"] = f"-t health: {failed[hkey]}"
        else:
            self._cache.pop(("health", row.npu_id, row.chip_id), None)
        if health is not None or level == 0:
            counts = self._count_faults(dev.uuid, frozenset(health.codes if health else ()))
        else:
            counts = dict(self._fault_counts.get(dev.uuid, {}))
        blocks: dict[str, CardReport] = {}
        for kind in ("usages", "common"):
            key = (kind, row.npu_id, None)
            rep = self._fresh(key)
            if isinstance(rep, CardReport):
                blocks[kind] = rep
            if key in failed:
                for name in _DETAIL_READINGS[kind]:
                    unread[name] = f"-t {kind}: {failed[key]}"
                if kind == "common" and row.power_watts is None and row.chip_id == min(card_chips):
                    # the MCU's card power is this chip's power (one-chip card) or the card's (310P)
                    power_name = "power_watts" if len(card_chips) == 1 else CARD_POWER.name
                    unread[power_name] = f"-t common: {failed[key]}"
        u, c = blocks.get("usages"), blocks.get("common")
        missing = [
            k for k, rep in (("usages", u), ("common", c)) if rep is not None and row.chip_id not in rep.chips
        ]
        for kind in missing:
            for name in _DETAIL_READINGS[kind]:
                unread[name] = f"-t {kind}: no chip {row.chip_id} block"
        power = card_power(c) if c is not None and row.chip_id == min(card_chips) else None
        kwargs = {
            "health": health,
            "fault_counts": counts,
            "card_chips": len(card_chips),
        }
        try:
            sample = sample_chip(
                row,
                table,
                usages=u.chips.get(row.chip_id) if u is not None else None,
                common=c.chips.get(row.chip_id) if c is not None else None,
                card_power_watts=power,
                **kwargs,  # type: ignore[arg-type]
            )
        except BackendError as exc:  # a malformed number in a detail block costs that block's readings
            sample = sample_chip(row, table, **kwargs)  # type: ignore[arg-type]
            for kind in ("usages", "common"):
                for name in _DETAIL_READINGS[kind]:
                    unread[name] = f"-t usages/common: {exc}"[:200]
        vkey = ("info-vnpu", row.npu_id, row.chip_id)
        vrep = self._fresh(vkey)
        slices = vnpu_slices(vrep, dev.uuid) if isinstance(vrep, VnpuReport) else ()
        if vkey in failed and self._answered_key(vkey):
            unread["slices"] = f"-t info-vnpu: {failed[vkey]}"
        if unread or slices:
            sample = replace(sample, unread={**sample.unread, **unread}, slices=slices)
        return sample

    def _answered_key(self, key: tuple[str, int, int | None]) -> bool:
        # vNPU listing is optional: a driver that never answered it (no virtualization) costs no reading
        return key in self._answered

    # ---- DCMI

    def _sample_dcmi(self) -> list[DeviceSample]:
        assert self._dcmi is not None
        chips = self._dcmi.chips()
        per_card: dict[int, int] = {}
        for card, _ in chips:
            per_card[card] = per_card.get(card, 0) + 1
        out: list[DeviceSample] = []
        for card, dev_id in chips:
            r = self._dcmi.read(card, dev_id)
            if r.bus_id:
                self._bus_ids[(card, dev_id)] = r.bus_id
            row = row_from_reading(r, self._bus_ids.get((card, dev_id)))
            table = InfoTable(version=None, chips=(row,))
            dev = device_of(row)
            if r.health is None and not _any_reading(r):
                # the library lists the chip but answers nothing for it: it cannot reach the chip
                out.append(DeviceSample.lost(dev, "library: no reading of the chip answered"))
                continue
            health = health_from_reading(r) if r.health is not None else None
            usages, common = blocks_from_reading(r)
            sample = sample_chip(
                row,
                table,
                usages=usages,
                common=common,
                health=health,
                fault_counts=(
                    self._count_faults(dev.uuid, frozenset(health.codes))
                    if health is not None
                    else dict(self._fault_counts.get(dev.uuid, {}))
                ),
                card_chips=per_card[card],
                memory_temperature_celsius=(
                    None if r.hbm_temperature_celsius is None else float(r.hbm_temperature_celsius)
                ),
            )
            if health is None:  # one failed call costs its readings, not the chip (as on the npu-smi path)
                why = next((f for f in r.failed if f.startswith("dcmi_get_device_health")), "no answer")
                sample = replace(  # "Unknown" is no failed health check: no health series, not a false one
                    sample,
                    health={},
                    vendor_metrics={k: v for k, v in sample.vendor_metrics.items() if k != HEALTH_STATE.name},
                    unread={**sample.unread, "health": f"library: {why}", "fault_events": f"library: {why}"},
                )
            out.append(sample)
        return out


def detect(ctx: BackendContext) -> Detection:
    """Found when npu-smi is on PATH (or at the driver's standard install paths, live only), or, with
    ``source: dcmi|auto``, when libdcmi.so is found."""
    opts = AscendOptions.from_mapping(ctx.options)
    if opts.source in ("dcmi", "auto"):
        lib = find_dcmi_library(opts.dcmi_library)
        if lib is not None:
            return Detection(True, f"libdcmi at {lib}")
        if opts.source == "dcmi":
            return Detection(False, "libdcmi.so not found (source: dcmi)")
    path = ctx.runner.which(opts.npu_smi) or _runner_fallback_path(ctx.runner)
    if path is None:
        return Detection(False, f"{opts.npu_smi} not found on PATH or in {', '.join(STANDARD_PATHS)}")
    return Detection(True, f"{opts.npu_smi} at {path}")


def create(ctx: BackendContext) -> AscendBackend:
    return AscendBackend(ctx.runner, AscendOptions.from_mapping(ctx.options))


SPEC = register(
    BackendSpec(
        name=BACKEND,
        vendor=VENDOR,
        create=create,
        detect=detect,
        formats=FORMATS,
        metrics=METRICS,
        priority=60,
        default_interval_seconds=10.0,
        options={
            "source": "string",
            "dcmi_library": "string",
            "npu_smi": "string",
            "timeout_seconds": "seconds",
            "poll_budget_seconds": "seconds",
            "card_queries": "bool",
            "vnpu": "bool",
            "detail_queries_per_poll": "int",
            "detail_max_age_seconds": "seconds",
        },
    )
)


def _any_reading(r: ChipReading) -> bool:
    """Whether DCMI answered any per-chip reading (a chip it lists but cannot reach answers none)."""
    return any(
        v is not None
        for v in (
            r.aicore_percent,
            r.temperature_celsius,
            r.power_deciwatts,
            r.hbm_total_mib,
            r.ddr_total_mib,
            r.aicore_freq_mhz,
        )
    )
