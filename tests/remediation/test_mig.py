"""MIG profile choice: table rows from the NVIDIA MIG user guide, exact targets out."""

from __future__ import annotations

import pytest

from xpuwatch.remediation import mig
from xpuwatch.remediation.actions.resize import hami_recommendation, target_profile


@pytest.mark.parametrize(
    ("model", "profile", "direction", "want"),
    [
        ("NVIDIA A100-SXM4-80GB", "1g.10gb", "memory", "1g.20gb"),  # 2x memory, same SMs
        ("NVIDIA A100-SXM4-80GB", "1g.10gb", "compute", "2g.20gb"),  # no SM-heavy/mem-light profile
        (
            "NVIDIA A100-SXM4-80GB",
            "1g.20gb",
            "memory",
            "3g.40gb",
        ),  # nothing larger at 1g: next with more memory
        ("NVIDIA A100-SXM4-80GB", "3g.40gb", "compute", "4g.40gb"),
        ("NVIDIA A100-SXM4-80GB", "4g.40gb", "memory", "7g.80gb"),
        ("NVIDIA A100-SXM4-40GB", "1g.5gb", "memory", "1g.10gb"),
        ("NVIDIA A100-SXM4-40GB", "2g.10gb", "compute", "3g.20gb"),
        ("NVIDIA H100 80GB HBM3", "1g.10gb", "memory", "1g.20gb"),
        ("NVIDIA H200", "1g.18gb", "memory", "1g.35gb"),
        ("NVIDIA H200", "3g.71gb", "compute", "4g.71gb"),
        ("NVIDIA A30", "1g.6gb", "memory", "2g.12gb"),
        ("NVIDIA A30", "2g.12gb", "compute", "4g.24gb"),
        ("NVIDIA A100-SXM4-80GB", "MIG 1g.10gb+me", "memory", "1g.20gb"),
    ],
)
def test_grow(model: str, profile: str, direction: str, want: str) -> None:
    assert target_profile(model, profile, direction) == (want, "")


def test_no_larger_profile_or_unknown_model() -> None:
    assert target_profile("NVIDIA A100-SXM4-80GB", "7g.80gb", "memory")[0] == ""
    assert target_profile("NVIDIA GeForce RTX 4090", "1g.10gb", "memory") == (
        "",
        "no MIG profile table for 'NVIDIA GeForce RTX 4090'",
    )
    assert target_profile("NVIDIA H200", "1g.10gb", "memory")[0] == ""  # an A100 name on an H200


def test_tables_are_consistent() -> None:
    for model in mig.MODELS:
        full = max(model.profiles, key=lambda p: p.compute)
        assert (full.compute, full.memory, full.max_instances) == (
            model.compute_slices,
            model.memory_slices,
            1,
        )
        for p in model.profiles:
            assert p.max_instances * p.compute <= model.compute_slices


def test_hami_recommendation() -> None:
    assert hami_recommendation({"nvidia.com/gpumem": "8000"}, "memory") == {"nvidia.com/gpumem": 16000}
    assert hami_recommendation({"nvidia.com/gpucores": "30"}, "compute") == {"nvidia.com/gpucores": 60}
    assert hami_recommendation({"nvidia.com/gpucores": "95"}, "compute") == {"nvidia.com/gpucores": 100}
    assert hami_recommendation({"nvidia.com/gpucores": "3"}, "compute") == {"nvidia.com/gpucores": 13}
    assert hami_recommendation({}, "memory") == {"nvidia.com/gpumem": "unknown"}
