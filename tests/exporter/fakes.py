"""Stand-in backends for exporter tests: each follows the ``vendors.base.Backend`` protocol exactly and
misbehaves in one documented way (hangs, raises, loses a device), as real vendor libraries and tools do."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from xpuwatch.vendors.base import BackendError, Device, DeviceSample


def device(index: int, vendor: str = "nvidia", model: str = "NVIDIA A100-SXM4-80GB") -> Device:
    return Device(
        vendor,
        model,
        str(index),
        f"GPU-fake-{vendor}-{index}",
        f"0000:{index:02x}:00.0",
        "550.1",
        f"S{index}",
    )


class GoodBackend:
    """Answers every poll with fixed readings for ``n`` devices; counts calls."""

    def __init__(self, name: str = "good", n: int = 2, vendor: str = "nvidia") -> None:
        self.name = name
        self.devices = [device(i, vendor) for i in range(n)]
        self.calls = 0
        self.lost: set[int] = set()

    def open(self) -> None:
        pass

    def sample(self) -> Sequence[DeviceSample]:
        self.calls += 1
        return [
            DeviceSample.lost(d, "GPU is lost") if i in self.lost else DeviceSample(d, utilization_ratio=0.5)
            for i, d in enumerate(self.devices)
        ]

    def close(self) -> None:
        pass


class HangingBackend(GoodBackend):
    """sample() blocks until ``release`` is set (a driver call that never returns); counts concurrent calls."""

    def __init__(self, name: str = "hang") -> None:
        super().__init__(name, 1, "amd")
        self.release = threading.Event()
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    def sample(self) -> Sequence[DeviceSample]:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self.release.wait()
            return super().sample()
        finally:
            with self._lock:
                self.active -= 1


class RaisingBackend(GoodBackend):
    """Every sample() raises: BackendError(reason) or, with ``reason=None``, a plain RuntimeError."""

    def __init__(self, name: str = "broken", reason: str | None = "exit_status") -> None:
        super().__init__(name, 1, "huawei")
        self.reason = reason

    def sample(self) -> Sequence[DeviceSample]:
        self.calls += 1
        if self.reason is None:
            raise RuntimeError("bug in the backend")
        raise BackendError("npu-smi exited 1", reason=self.reason)


class FlakyOpenBackend(GoodBackend):
    """open() fails ``failures`` times with BackendError(reason="init"), then succeeds."""

    def __init__(self, failures: int) -> None:
        super().__init__("flaky", 1)
        self.failures = failures
        self.opens = 0

    def open(self) -> None:
        self.opens += 1
        if self.opens <= self.failures:
            raise BackendError("driver not loaded", reason="init")
