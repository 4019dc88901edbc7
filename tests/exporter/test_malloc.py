"""The exporter's own allocator setting (exporter.cli.tune_malloc): glibc's mmap threshold fixed at 256 KiB
as the images set it, so that a body freed once does not move every later body into the heaps (RSS stepping
between plateaus, docs/exporter.md "Memory"). Checked in fresh interpreters against glibc itself, through
its ``mallinfo2`` (blocks mapped on their own: ``hblks``)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from xpuwatch.exporter.cli import tune_malloc

PROBE = """
import ctypes, sys
from xpuwatch.exporter.cli import tune_malloc

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
print(tune_malloc({}) if sys.argv[1] == "tune" else "untuned")
big = bytearray(8 << 20)  # mapped (above any threshold), then freed: glibc raises its own threshold to 8 MiB
del big
before = libc.mallinfo2().hblks
body = bytearray(1 << 20)  # a 1 MiB body
print(libc.mallinfo2().hblks - before)
"""


def _glibc() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc 2.33+ (mallinfo2) needed")
@pytest.mark.parametrize(("mode", "want"), [("tune", ["True", "1"]), ("untuned", ["untuned", "0"])])
def test_a_body_is_mapped_on_its_own_after_a_larger_one_was_freed(mode: str, want: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    # untuned, the 1 MiB body comes from the heap glibc grew for it (not mapped: 0 new mapped blocks)
    assert done.stdout.split() == want


def test_the_users_or_the_images_setting_wins() -> None:
    assert tune_malloc({"MALLOC_MMAP_THRESHOLD_": "1048576"}) is False
