"""``rocm-smi --json`` (AMD's, and the Hygon DTK fork's: same layout, different keys and units) into DeviceSamples.

Vendor layer: pure parsers; ``rocm_smi_sample`` is shared with ``vendors.hygon``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from xpuwatch.vendors.amd.readings import (
    UNKNOWN_MODEL,
    VENDOR,
    Notes,
    count,
    device_uuid,
    load_json,
    nonneg,
    printed,
    quantity,
    ratio,
    scaled,
    text,
    with_notes,
)
from xpuwatch.vendors.base import Device, DeviceSample, ParseError

_CARD = re.compile(r"^card(\d+)$")
_KEY_UNIT = re.compile(r"^(?P<name>.*?)\s*\((?P<unit>[^()]*)\)\s*$")


def rocm_smi_cards(doc: object, what: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``cardN`` objects of a rocm-smi JSON document, by index. Raises ParseError."""
    if not isinstance(doc, Mapping):
        raise ParseError(f"{what}: expected a JSON object keyed card0..cardN")
    cards: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in doc.items():
        m = _CARD.match(str(key))
        if not m:
            continue  # "system" and other non-card sections
        if not isinstance(value, Mapping):
            raise ParseError(f"{what}: {key} is not an object")
        cards.append((str(int(m.group(1))), value))
    if not cards:
        raise ParseError(f"{what}: no card entries")
    return sorted(cards, key=lambda kv: int(kv[0]))


class _Keys:
    """Case-insensitive lookup of rocm-smi keys, with the unit taken from the key's last "(...)"."""

    def __init__(self, card: Mapping[str, Any]) -> None:
        self._by_name: dict[str, tuple[object, str | None]] = {}
        for key, value in card.items():
            k = str(key).strip().lower()
            if not k:
                continue  # DTK prints an empty "" key
            m = _KEY_UNIT.match(k)
            name, unit = (m.group("name"), m.group("unit")) if m else (k, None)
            self._by_name.setdefault(k, (value, None))
            self._by_name.setdefault(name, (value, unit))

    def get(self, *names: str) -> tuple[object, str | None]:
        """The first present name (lower-case, without the unit suffix) as (raw value, unit from key) that
        holds a printed value ("N/A" skipped), else the first present one. A garbled value is returned, to
        be reported unread, never silently replaced by a later key's."""
        for n in names:
            hit = self._by_name.get(n)
            if hit is not None and printed(hit[0]):
                return hit
        for n in names:
            if n in self._by_name:
                return self._by_name[n]
        return None, None

    def scaled(self, kind: str, notes: Notes, field: str, *names: str) -> float | None:
        """The first of ``names`` in the base unit of ``kind``; unreadable -> None and ``unread[field]``."""
        raw, unit = self.get(*names)
        q = quantity(raw)
        if q is None:
            return scaled(raw, kind, None, notes, names[0], field)  # None; records a printed value
        return nonneg(
            scaled({"value": q[0], "unit": q[1] or unit}, kind, None, notes, names[0], field),
            notes,
            names[0],
            field,
        )

    def ratio(self, notes: Notes, field: str, *names: str) -> float | None:
        raw, unit = self.get(*names)
        if unit not in (None, "%"):
            notes.drop(field, f"{names[0]}: unit {unit!r} is not %")
            return None
        return ratio(raw, notes, names[0], field)

    def text(self, *names: str) -> str | None:
        for n in names:
            if (t := text(self._by_name.get(n, (None, None))[0])) is not None:
                return t
        return None


def rocm_smi_sample(vendor: str, idx: str, card: Mapping[str, Any], driver: str | None) -> DeviceSample:
    """One rocm-smi ``cardN`` object -> DeviceSample; keys of AMD's rocm-smi and of Hygon's fork.

    Utilization ``GPU use (%)`` / Hygon ``DCU use (%)``, ``HCU use (%)``; memory bandwidth (AMD only)
    ``GPU Memory Read/Write Activity (%)`` (older ``GPU memory use (%)``: rsmi memory busy percent);
    VRAM ``VRAM Total [Used] Memory (B|MiB)``; allocated share ``GPU Memory Allocated (VRAM%)`` (AMD) /
    ``DCU|HCU memory use (%)`` (Hygon: the hy-smi table's ``VRAM%``; 98 % for 64169 of 65520 MiB in the
    BW capture, so allocation, not bus activity) -> ``memory_used_ratio`` when bytes are absent;
    temperatures ``Temperature (Sensor edge|junction|memory|mem|HBM n)`` (edge -> core), Hygon ``(Sensor core)``
    -> core with edge then kept as ``edge`` (an explicit sensor wins over the edge-as-core guess); power ``Current Socket Graphics Package Power (W)`` else ``Average Graphics Package Power (W)``;
    cap ``Max Graphics Package Power (W)``; energy ``Accumulated Energy (uJ)``; ``PCIe Replay Count``.
    Each value is read on its own: an unreadable one is named in ``unread``, "N/A" is None.
    """
    k = _Keys(card)
    notes = Notes()
    temps: dict[str, float] = {}
    # A sensor the tool names wins over a guess: Hygon prints "(Sensor core)" beside edge and junction, so
    # core is that sensor and edge keeps its own name; without a core sensor, edge stands for the die (core).
    explicit_core = k.get("temperature (sensor core)")[0] is not None
    for sensor, names in (
        ("core", ("temperature (sensor core)",) if explicit_core else ("temperature (sensor edge)",)),
        ("edge", ("temperature (sensor edge)",) if explicit_core else ()),
        ("hotspot", ("temperature (sensor junction)", "temperature (sensor hotspot)")),
        ("memory", ("temperature (sensor memory)", "temperature (sensor mem)", "temperature (sensor vram)")),
    ):
        if not names:
            continue
        t = k.scaled("celsius", notes, f"temperatures_celsius.{sensor}", *names)
        if t is not None:
            temps[sensor] = t
    if "memory" not in temps:  # MI2xx/MI3xx print per-stack HBM sensors instead: report the hottest
        hbm = [
            t
            for i in range(8)
            if (
                t := k.scaled(
                    "celsius", notes, "temperatures_celsius.memory", f"temperature (sensor hbm {i})"
                )
            )
            is not None
        ]
        if hbm:
            temps["memory"] = max(hbm)
    device = Device(
        vendor=vendor,
        model=k.text("card series", "device name", "card model") or UNKNOWN_MODEL,
        index=idx,
        uuid=device_uuid(vendor, idx, k.text("unique id"), k.text("serial number"), k.text("pci bus")),
        pci_bus_id=k.text("pci bus"),
        driver_version=driver,
        serial=k.text("serial number"),
    )
    used = k.scaled("bytes", notes, "memory_used_bytes", "vram total used memory")
    total = k.scaled("bytes", notes, "memory_total_bytes", "vram total memory")
    share = None
    if used is None or total is None:
        share = k.ratio(
            notes,
            "memory_used_ratio",
            "gpu memory allocated",
            "dcu memory use",
            "hcu memory use",
        )
    sample = DeviceSample(
        device=device,
        utilization_ratio=k.ratio(notes, "utilization_ratio", "gpu use", "dcu use", "hcu use"),
        memory_bandwidth_utilization_ratio=k.ratio(
            notes, "memory_bandwidth_utilization_ratio", "gpu memory read/write activity", "gpu memory use"
        ),
        memory_used_bytes=used,
        memory_total_bytes=total,
        memory_used_ratio=share,
        temperatures_celsius=temps,
        power_watts=k.scaled(
            "power",
            notes,
            "power_watts",
            "current socket graphics package power",
            "average graphics package power",
        ),
        power_limit_watts=k.scaled("power", notes, "power_limit_watts", "max graphics package power"),
        energy_joules=k.scaled("energy", notes, "energy_joules", "accumulated energy"),
        pcie_replay_errors=count(k.get("pcie replay count")[0], notes, "pcie_replay_errors"),
    )
    return with_notes(sample, notes)


def rocm_smi_driver(doc: Mapping[str, Any]) -> str | None:
    """Driver version from the ``system`` section of ``rocm-smi -a --json``/``--showdriverversion``."""
    system = doc.get("system")
    return _Keys(system).text("driver version") if isinstance(system, Mapping) else None


def parse_rocm_smi_json(raw: str) -> list[DeviceSample]:
    """AMD ``rocm-smi --json`` (dict ``card0..N``, every value a string) -> DeviceSamples. Raises ParseError.

    Hygon DTK output is refused (use the ``hygon`` backend's parser); ECC is not in rocm-smi JSON.
    """
    doc = load_json(raw, "rocm-smi")
    cards = rocm_smi_cards(doc, "rocm-smi")
    if any(hygon_card(card) for _, card in cards):
        raise ParseError("rocm-smi: this is Hygon DCU output (DCU keys); parse it as hy-smi-json")
    driver = rocm_smi_driver(doc) if isinstance(doc, Mapping) else None
    return [rocm_smi_sample(VENDOR, idx, card, driver) for idx, card in cards]


def hygon_card(card: Mapping[str, Any]) -> bool:
    """Hygon markers in one rocm-smi card: a "DCU ..."/"HCU ..." key or a Haiguang/Hygon vendor string."""
    for key, value in card.items():
        k = str(key).strip().lower()
        if k.startswith(("dcu ", "hcu ")):
            return True
        if (
            k == "card vendor"
            and isinstance(value, str)
            and ("haiguang" in value.lower() or "hygon" in value.lower())
        ):
            return True
    return False


def hygon_markers(raw: str) -> bool:
    """Hygon markers anywhere in a tool's text: a "DCU ..."/"HCU ..." JSON key or the vendor's name."""
    low = raw.lower()
    return '"dcu ' in low or '"hcu ' in low or "haiguang" in low or "hygon" in low


def sniff_rocm_smi_json(raw: str) -> bool:
    """AMD rocm-smi JSON: "cardN" objects with rocm-smi keys and no Hygon markers."""
    head = raw[:20000]
    return (
        re.search(r'"card\d+"\s*:', head) is not None
        and any(
            k in head
            for k in ("GPU use (%)", "VRAM Total", "Temperature (Sensor", "Card Series", "Unique ID")
        )
        and not hygon_markers(head)
    )
