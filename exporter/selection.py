"""Metric selection: which catalog families and breakdowns a render writes (node_exporter's collector flags).

A *name* is a catalog family (``accelerator_clock_throttled``) or a breakdown ``<family>.<label>``
(``accelerator_link_errors_total.link``, exporter.catalog.BREAKDOWNS). Every family is on by default; each
breakdown has its own default. Three sources, each overriding the one before for the names it gives
(settings precedence: file, then environment, then flags):

- config file ``metrics: {disable_defaults: false, include: [...], exclude: [...]}``
- environment ``XPUWATCH_METRICS_INCLUDE`` / ``XPUWATCH_METRICS_EXCLUDE`` (comma-separated),
  ``XPUWATCH_METRICS_DISABLE_DEFAULTS`` (``true``/``false``)
- flags ``--collector.<name>`` / ``--no-collector.<name>`` / ``--collector.disable-defaults``, as
  node_exporter spells them (``--collector.cpu``, ``--no-collector.wifi``, ``--collector.disable-defaults``).

``disable_defaults`` (the last source that sets it wins) switches every device and slice family and every
breakdown off, so that only the included ones are written; the exporter's own ``xpuwatch_*`` families stay
on (as node_exporter keeps its ``node_scrape_collector_*``) unless excluded by name. A name in both include
and exclude of one source, or a name the catalog does not know, is a ``SelectionError`` naming the known
ones. Pure: no I/O; ``blind()`` says which generated alerts and panels a selection leaves without data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from xpuwatch.exporter import catalog as C

FLAG = re.compile(r"^--(no-)?collector\.(.+)$")
DISABLE_DEFAULTS = "disable-defaults"


class SelectionError(ValueError):
    """An unknown name or a contradiction; one line, starting with the source (``--no-collector.x: ...``)."""


def breakdowns() -> dict[str, C.Breakdown]:
    """Breakdowns by selection name (``<family>.<name>``), whose family is in the catalog."""
    names = set(C.by_name())
    return {b.key: b for b in C.BREAKDOWNS if b.family in names}


def known() -> tuple[str, ...]:
    """Every name a selection may give: catalog families in catalog order, then breakdowns."""
    return (*C.by_name(), *breakdowns())


def _default_off() -> frozenset[str]:
    return frozenset(k for k, b in breakdowns().items() if not b.default)


@dataclass(frozen=True)
class Layer:
    """What one source (file, environment or flags) says: names switched on and off, and
    ``disable_defaults`` (None: not said)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    disable_defaults: bool | None = None


@dataclass(frozen=True)
class Selection:
    """The families and breakdowns switched off (``off``); everything else in the catalog is written."""

    off: frozenset[str] = frozenset()

    @classmethod
    def default(cls) -> Selection:
        return cls(_default_off())

    def family_on(self, name: str) -> bool:
        return name not in self.off

    def dropped(self) -> dict[str, tuple[frozenset[str], str]]:
        """Per family with a breakdown off and the family on: (labels dropped, how values combine). Two
        breakdowns off on one family must combine alike (the catalog keeps one aggregate per family)."""
        out: dict[str, tuple[frozenset[str], str]] = {}
        for key, b in breakdowns().items():
            if key in self.off and self.family_on(b.family):
                labels, _ = out.get(b.family, (frozenset(), b.aggregate))
                out[b.family] = (labels | set(b.labels), b.aggregate)
        return out


FLAGS = "--collector"
"""The source name ``resolve`` gives the flags' layer in its errors (``--no-collector.<name>: ...``)."""


def _where(source: str, kind: str, name: str) -> str:
    """Where a name was given: ``metrics.include``, ``XPUWATCH_METRICS_EXCLUDE``, ``--no-collector.x``."""
    if source == FLAGS:
        return f"--{'no-' if kind == 'exclude' else ''}collector.{name}"
    if source.isupper():
        return f"{source}_{kind.upper()}"
    return f"{source}.{kind}"


def _check(names: Iterable[str], source: str, kind: str, all_known: Sequence[str]) -> None:
    known_set = set(all_known)
    for n in names:
        if n not in known_set:
            raise SelectionError(
                f"{_where(source, kind, n)}: unknown metric family or breakdown {n!r} "
                f"(known: {', '.join(all_known)})"
            )


def resolve(layers: Sequence[tuple[str, Layer]]) -> Selection:
    """The selection of ``layers`` (source name, layer), lowest precedence first. Raises SelectionError."""
    all_known = known()
    catalog = C.by_name()
    disable = False
    for _, layer in layers:
        if layer.disable_defaults is not None:
            disable = layer.disable_defaults
    if disable:
        off = {n for n, d in catalog.items() if d.scope != "exporter"} | set(breakdowns())
    else:
        off = set(_default_off())
    for source, layer in layers:
        _check(layer.include, source, "include", all_known)
        _check(layer.exclude, source, "exclude", all_known)
        both = sorted(set(layer.include) & set(layer.exclude))
        if both:
            raise SelectionError(f"{_where(source, 'exclude', both[0])}: {both[0]!r} is also included")
        off -= set(layer.include)
        off |= set(layer.exclude)
    return Selection(frozenset(off))


def split_flags(argv: Sequence[str]) -> tuple[list[str], Layer]:
    """(argv without the collector flags, the flags' layer). ``--collector.<name>`` includes,
    ``--no-collector.<name>`` excludes, ``--collector.disable-defaults`` disables the defaults. Names are
    checked by ``resolve``."""
    rest: list[str] = []
    include: list[str] = []
    exclude: list[str] = []
    disable: bool | None = None
    for i, arg in enumerate(argv):
        if arg == "--":
            rest.extend(argv[i:])
            break
        m = FLAG.match(arg)
        if m is None:
            rest.append(arg)
            continue
        negated, name = bool(m.group(1)), m.group(2)
        if name == DISABLE_DEFAULTS:
            disable = not negated
        else:
            (exclude if negated else include).append(name)
    return rest, Layer(tuple(include), tuple(exclude), disable)


_WORD = r"(?<![A-Za-z0-9_]){}(?![A-Za-z0-9_])"


def reads(expr: str, families: Iterable[str] | None = None) -> tuple[str, ...]:
    """Catalog families a PromQL expression (or a series name recorded from one) reads: a family's name,
    or a counter's name without ``_total`` (recorded series are named ``level:<name>:operation``), as a
    whole word."""
    names = tuple(C.by_name()) if families is None else tuple(families)
    out = []
    for n in names:
        d = C.by_name().get(n)
        forms = [n]
        if d is not None and d.type == "counter" and n.endswith("_total"):
            forms.append(n.removesuffix("_total"))
        if d is not None and d.type == "info" and n.endswith("_info"):
            forms.append(n.removesuffix("_info"))
        if any(re.search(_WORD.format(re.escape(f)), expr) for f in forms):
            out.append(n)
    return tuple(out)


def label_read(expr: str, label: str) -> bool:
    """Whether a PromQL expression (or Grafana legend) reads ``label``: in a ``by (...)`` list, a matcher
    (``label="x"``, ``=~``, ``!=``, ``!~``) or a legend ``{{label}}``. ``without (label)`` does not read it."""
    lab = re.escape(label)
    for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
        if label in {g.strip() for g in group.split(",")}:
            return True
    if re.search(rf"[{{,]\s*{lab}\s*(=~|!~|!=|=)", expr):
        return True
    return bool(re.search(r"\{\{\s*" + lab + r"\s*\}\}", expr))


@dataclass(frozen=True)
class Reader:
    """A generated alert or panel and what it reads: ``families`` and the ``labels`` it reads of them."""

    kind: str  # "alert" | "record" | "panel"
    name: str
    families: tuple[str, ...]
    labels: Mapping[str, tuple[str, ...]]
    absent_fires: tuple[str, ...] = ()
    """Families whose disappearance this alert fires on (``max_over_time(F[..]) unless on (...) F``:
    AcceleratorTelemetryMissing): switching one off pages for each device that had it, for the lookback."""


def blind(selection: Selection, readers: Iterable[Reader]) -> list[tuple[str, Reader]]:
    """(what is off, reader) for each reader that reads an excluded family, or a label a switched-off
    breakdown drops, in reader order."""
    bds = breakdowns()
    out: list[tuple[str, Reader]] = []
    for r in readers:
        for fam in r.families:
            if not selection.family_on(fam):
                out.append((fam, r))
                continue
            for key, b in bds.items():
                if b.family == fam and key in selection.off and set(b.labels) & set(r.labels.get(fam, ())):
                    out.append((key, r))
    return out
