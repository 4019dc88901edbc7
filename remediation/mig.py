"""MIG profile tables per GPU model and the choice of a larger profile for a starved slice (pure).

Source: NVIDIA MIG User Guide, "Supported MIG Profiles"
(docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html): A30-24GB, A100-SXM4-40GB,
A100/H100 80GB ("names change according to the memory proportion"), H200 141GB; instance counts
cross-checked with NVIDIA/mig-parted ``deployments/systemd/config-default.yaml``. ``+me`` (media
extension) variants are left out: same SMs and memory as the plain profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["memory", "compute"]


@dataclass(frozen=True)
class Profile:
    """One GPU-instance profile: ``compute`` and ``memory`` in slices of the full GPU (``compute`` out of
    ``GpuModel.compute_slices``, memory out of ``GpuModel.memory_slices``), ``max_instances`` per GPU."""

    name: str
    compute: int
    memory: int
    max_instances: int


@dataclass(frozen=True)
class GpuModel:
    """A MIG-capable model: ``match`` substrings of the NVML product name select it."""

    name: str
    match: tuple[str, ...]
    compute_slices: int
    memory_slices: int
    profiles: tuple[Profile, ...]


def _p(name: str, compute: int, memory: int, count: int) -> Profile:
    return Profile(name, compute, memory, count)


MODELS: tuple[GpuModel, ...] = (
    GpuModel(
        "A30-24GB",
        ("A30",),
        4,
        4,
        (_p("1g.6gb", 1, 1, 4), _p("2g.12gb", 2, 2, 2), _p("4g.24gb", 4, 4, 1)),
    ),
    GpuModel(
        "A100-40GB",
        ("A100-SXM4-40GB", "A100-PCIE-40GB", "A100 40GB"),
        7,
        8,
        (
            _p("1g.5gb", 1, 1, 7),
            _p("1g.10gb", 1, 2, 4),
            _p("2g.10gb", 2, 2, 3),
            _p("3g.20gb", 3, 4, 2),
            _p("4g.20gb", 4, 4, 1),
            _p("7g.40gb", 7, 8, 1),
        ),
    ),
    GpuModel(
        "A100/H100-80GB",
        ("A100-SXM4-80GB", "A100 80GB", "A100-PCIE-80GB", "H100 80GB", "H100-SXM5-80GB", "H100 PCIe"),
        7,
        8,
        (
            _p("1g.10gb", 1, 1, 7),
            _p("1g.20gb", 1, 2, 4),
            _p("2g.20gb", 2, 2, 3),
            _p("3g.40gb", 3, 4, 2),
            _p("4g.40gb", 4, 4, 1),
            _p("7g.80gb", 7, 8, 1),
        ),
    ),
    GpuModel(
        "H200-141GB",
        ("H200",),
        7,
        8,
        (
            _p("1g.18gb", 1, 1, 7),
            _p("1g.35gb", 1, 2, 4),
            _p("2g.35gb", 2, 2, 3),
            _p("3g.71gb", 3, 4, 2),
            _p("4g.71gb", 4, 4, 1),
            _p("7g.141gb", 7, 8, 1),
        ),
    ),
)


def model_for(product_name: str) -> GpuModel | None:
    """The table for an NVML product name (e.g. ``NVIDIA A100-SXM4-80GB``), or None if not MIG-capable
    or unknown."""
    for model in MODELS:
        if any(m in product_name for m in model.match):
            return model
    return None


def profile_of(model: GpuModel, name: str) -> Profile | None:
    base = name.removeprefix("MIG ").split("+", 1)[0]
    return next((p for p in model.profiles if p.name == base), None)


def grow(model: GpuModel, current: str, direction: Direction) -> Profile | None:
    """The smallest profile strictly larger than ``current`` in ``direction``.

    ``memory``: more memory at the same compute if the table has one (1g.10gb -> 1g.20gb), else the
    smallest profile with more memory. ``compute``: the smallest profile with more compute and no less
    memory (1g.10gb -> 2g.20gb; MIG has no compute-heavy, memory-light profile). None when ``current`` is
    unknown or already the largest.
    """
    cur = profile_of(model, current)
    if cur is None:
        return None
    if direction == "memory":
        same = [p for p in model.profiles if p.compute == cur.compute and p.memory > cur.memory]
        pool = same or [p for p in model.profiles if p.memory > cur.memory and p.compute >= cur.compute]
        key = lambda p: (p.memory, p.compute)  # noqa: E731
    else:
        pool = [p for p in model.profiles if p.compute > cur.compute and p.memory >= cur.memory]
        key = lambda p: (p.compute, p.memory)  # noqa: E731
    return min(pool, key=key) if pool else None
