"""`xpuwatch inspect --explain`: for one parsed tool output, what was not read and why (bug-report text).

Pure: (file name, OutputFormat, tool text, the samples it parsed to) -> comment lines. The lines start with
``# `` so that inspect's stdout stays a valid Prometheus exposition with the explanation appended, one file
a user can attach to a bug report.
"""

from __future__ import annotations

from collections.abc import Sequence

from xpuwatch.exporter.plausibility import describe, implausible
from xpuwatch.vendors.base import DeviceSample
from xpuwatch.vendors.registry import OutputFormat

# Scalar readings of DeviceSample that a tool may or may not give, in the order they are listed.
_SCALARS = (
    "utilization_ratio",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_watts",
    "power_limit_watts",
)
_MAPPINGS = ("temperatures_celsius",)
MAX_UNUSED = 40  # unused columns listed per file; the rest are counted


def explain(path: str, fmt: OutputFormat, text: str, samples: Sequence[DeviceSample]) -> list[str]:
    """Comment lines: the format and device count; the sections the parser read, when the format names them
    (``OutputFormat.sections``); per device whether it is up (else the tool's reason),
    each reading in ``DeviceSample.unread`` with its reason, and the readings the output did not give
    (the tool printed N/A or has no such column); then the columns/keys of the output the parser does not
    use, when the format has an ``explain`` hook. Never raises (a failing hook is reported as a line)."""
    out = [f"# explain {path}: format {fmt.name}, {len(samples)} device(s)"]
    if fmt.sections is not None:
        try:
            out.extend(f"#   read: {line}" for line in fmt.sections(text))
        except Exception as exc:  # a diagnostic aid, like the explain hook below
            out.append(f"#   sections: could not be listed: {type(exc).__name__}: {exc}")
    for s in samples:
        d = s.device
        state = "up" if s.up else f"DOWN: {s.error or 'no reason given'}"
        out.append(f"#   device {d.index or '?'} ({d.model}, uuid {d.uuid or '?'}): {state}")
        if not s.up:
            continue
        if s.error:
            out.append(f"#     note: {s.error}")
        for name, why in sorted(s.unread.items()):
            out.append(f"#     unread {name}: {why}")
        for reason, _ in implausible(s):
            out.append(f"#     implausible, exported as printed: {reason}: {describe(s, reason)}")
        missing = [n for n in _SCALARS if getattr(s, n) is None and n not in s.unread]
        missing += [n for n in _MAPPINGS if not getattr(s, n) and n not in s.unread]
        if missing:
            out.append(f"#     no value (printed as N/A, or not in this output): {', '.join(missing)}")
    if fmt.explain is None:
        out.append(f"#   unused columns: not known ({fmt.name} has no explain hook)")
        return out
    try:
        unused = list(fmt.explain(text))
    except Exception as exc:  # the hook is a diagnostic aid: it must not cost the exposition
        out.append(f"#   unused columns: could not be listed: {type(exc).__name__}: {exc}")
        return out
    if not unused:
        out.append("#   unused columns: none (every column/key printed is read)")
    for line in unused[:MAX_UNUSED]:
        out.append(f"#   not read: {line}")
    if len(unused) > MAX_UNUSED:
        out.append(f"#   not read: ... and {len(unused) - MAX_UNUSED} more")
    return out
