"""Ascend backend (I/O edge): polls npu-smi or libdcmi, keeps fault counts and lost chips; the one registration."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from vendors.ascend.card_report import parse_card_report, parse_health
from vendors.ascend.dcmi import blocks_from_reading, health_from_reading, row_from_reading
from vendors.ascend.info_table import parse_info_table
from vendors.ascend.libdcmi import Dcmi
from vendors.ascend.libdcmi import find_library as find_dcmi_library
from vendors.ascend.records import (
    BACKEND,
    MAX_FAULT_CODES,
    METRICS,
    OVERFLOW_CODE,
    STANDARD_PATHS,
    TOOL,
    UNSUPPORTED_AFTER,
    VENDOR,
    CardReport,
    ChipRow,
    HealthReport,
    InfoTable,
)
from vendors.ascend.samples import FORMATS, card_power, device_of, health_level, sample_chip
from vendors.base import BackendError, Device, DeviceSample, ParseError
from vendors.command import CommandRunner, SubprocessRunner
from vendors.registry import BackendContext, BackendSpec, Detection, register

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------------
# The backend (I/O edge)

SOURCES = ("cli", "dcmi", "auto")


def _flag(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


@dataclass(frozen=True)
class AscendOptions:
    """The ``ascend`` section of the config file.

    ``source``: ``cli`` (npu-smi, default), ``dcmi`` (libdcmi.so through ctypes; fails to open without it)
    or ``auto`` (DCMI when the library loads, else npu-smi). ``dcmi_library``: path of libdcmi.so (default:
    the driver's install paths, then the loader's search). ``npu_smi``: path or name of the tool.
    ``timeout_seconds``: per npu-smi call. ``poll_budget_seconds``: all calls of one poll together; cards not
    reached in time are reported lost; keep it below the poller's timeout for this backend (default 2 x the
    10 s interval) so that a slow card costs that card, not the poll. ``card_queries``: also run ``-t usages`` and ``-t common`` per card
    (bandwidth, AI CPU/ctrl CPU, clocks, 310P card power); False reads only ``npu-smi info`` (plus
    ``-t health`` for chips that are not OK).
    """

    source: str = "cli"
    dcmi_library: str | None = None
    npu_smi: str = TOOL
    timeout_seconds: float = 8.0
    poll_budget_seconds: float = 15.0
    card_queries: bool = True

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
            )
        except (TypeError, ValueError) as exc:
            raise BackendError(f"ascend options: {exc}", reason="config") from exc
        if out.source not in SOURCES:
            raise BackendError(f"ascend options: source must be one of {', '.join(SOURCES)}", reason="config")
        if not (out.timeout_seconds > 0 and out.poll_budget_seconds > 0):
            raise BackendError("ascend options: timeouts must be > 0", reason="config")
        return out


def _runner_fallback_path(runner: CommandRunner) -> str | None:
    # Only a live runner (or a recorder around one) may look at this machine's driver install paths.
    inner = getattr(runner, "inner", runner)
    if isinstance(inner, SubprocessRunner):
        return next((p for p in STANDARD_PATHS if os.access(p, os.X_OK)), None)
    return None


class AscendBackend:
    """Polls the chips through npu-smi (the injected CommandRunner) or libdcmi.so.

    npu-smi, per poll: ``npu-smi info`` (failure -> BackendError: nothing could be read); per card
    ``-t usages -i N`` and ``-t common -i N`` (a timeout, "Invalid card id." or a failure of a query that
    answered before -> that card's chips are lost; a query that never answered is taken as unsupported:
    the chips stay up with a note, and after UNSUPPORTED_AFTER polls it is no longer run); per chip whose
    Health is not OK ``-t health -i N -c C`` (failure -> that chip is lost). DCMI, per poll: the card list
    (failure -> BackendError), then every chip's readings (health unreadable -> that chip is lost).
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
        self._answered: set[tuple[int, str]] = set()  # (card, usages|common) that answered at least once
        self._unsupported: dict[tuple[int, str], int] = {}  # failures before any answer
        self._fault_counts: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    @property
    def source(self) -> str:
        """ "dcmi" or "cli": what ``open`` settled on."""
        return "dcmi" if self._dcmi is not None else "cli"

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

    def _sample_cli(self) -> list[DeviceSample]:
        deadline = self._monotonic() + self._opts.poll_budget_seconds
        table = parse_info_table(self._run(["info"], deadline))
        card_fail: dict[int, str] = {}
        usages: dict[int, CardReport] = {}
        common: dict[int, CardReport] = {}
        per_card: dict[int, list[int]] = {}
        for c in table.chips:
            per_card.setdefault(c.npu_id, []).append(c.chip_id)
        card_note: dict[int, str] = {}
        if self._opts.card_queries:
            for npu in sorted(per_card):
                for kind, into in (("usages", usages), ("common", common)):
                    if self._unsupported.get((npu, kind), 0) >= UNSUPPORTED_AFTER:
                        continue
                    try:
                        into[npu] = self._card_report(npu, kind, deadline)
                        self._answered.add((npu, kind))
                        self._unsupported.pop((npu, kind), None)
                    except BackendError as exc:
                        why = f"{exc.reason}: {exc}"
                        if self._card_gone(npu, kind, exc):
                            card_fail[npu] = why
                            break
                        self._unsupported[(npu, kind)] = self._unsupported.get((npu, kind), 0) + 1
                        card_note[npu] = f"-t {kind} not answered (never has been): {why}"
        out: list[DeviceSample] = []
        for row in table.chips:
            dev = device_of(row, table.version)
            if row.npu_id in card_fail:
                out.append(DeviceSample.lost(dev, card_fail[row.npu_id]))
                continue
            try:
                sample = self._sample_row(row, table, usages, common, per_card[row.npu_id], deadline)
            except BackendError as exc:
                out.append(DeviceSample.lost(dev, f"{exc.reason}: {exc}"))
                continue
            if row.npu_id in card_note and sample.error is None:
                sample = replace(sample, error=card_note[row.npu_id])
            out.append(sample)
        return out

    def _card_gone(self, npu: int, kind: str, exc: BackendError) -> bool:
        """Whether a failed per-card query means the card is in trouble (its chips are lost), rather than a
        query this driver does not answer: a timeout, "Invalid card id.", or a query that worked before."""
        return (
            exc.reason == "timeout" or "invalid card id" in str(exc).lower() or (npu, kind) in self._answered
        )

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
        usages: Mapping[int, CardReport],
        common: Mapping[int, CardReport],
        card_chips: Sequence[int],
        deadline: float,
    ) -> DeviceSample:
        health: HealthReport | None = None
        if health_level(row.health) != 0:
            text = self._run(
                ["info", "-t", "health", "-i", str(row.npu_id), "-c", str(row.chip_id)], deadline
            )
            health = parse_health(text)
        counts = self._count_faults(device_of(row).uuid, frozenset(health.codes if health else ()))
        u = usages.get(row.npu_id)
        c = common.get(row.npu_id)
        power = card_power(c) if c is not None and row.chip_id == min(card_chips) else None
        missing = [
            k for k, rep in (("usages", u), ("common", c)) if rep is not None and row.chip_id not in rep.chips
        ]
        sample = sample_chip(
            row,
            table,
            usages=u.chips.get(row.chip_id) if u is not None else None,
            common=c.chips.get(row.chip_id) if c is not None else None,
            card_power_watts=power,
            health=health,
            fault_counts=counts,
            card_chips=len(card_chips),
        )
        if missing:
            sample = replace(sample, error=f"no chip {row.chip_id} block in -t {'/'.join(missing)}")
        return sample

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
            if r.health is None:
                out.append(DeviceSample.lost(dev, "library: dcmi_get_device_health failed"))
                continue
            health = health_from_reading(r)
            usages, common = blocks_from_reading(r)
            sample = sample_chip(
                row,
                table,
                usages=usages,
                common=common,
                health=health,
                fault_counts=self._count_faults(dev.uuid, frozenset(health.codes)),
                card_chips=per_card[card],
                memory_temperature_celsius=(
                    None if r.hbm_temperature_celsius is None else float(r.hbm_temperature_celsius)
                ),
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
    )
)
