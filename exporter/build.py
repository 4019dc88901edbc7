"""Service identity for every xpuwatch process: version, revision, ``xpuwatch_build_info`` and the standard
process/python collectors that exporter, relay and remediation all serve on /metrics.

Follows the Prometheus conventions of exporter-toolkit/node_exporter (``<name>_build_info`` gauge of 1 with
``version``, ``revision`` labels; ``process_*`` from /proc; ``python_*`` from prometheus-client's platform and
GC collectors).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import metadata
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

BUILD_INFO = "xpuwatch_build_info"
REVISION_ENV = "XPUWATCH_BUILD_REVISION"
"""Set by the image build (``--build-arg REVISION=$(git rev-parse HEAD)``, deploy/Dockerfile)."""

# Families that differ between runs of the same code (excluded from golden files).
VOLATILE_PREFIXES = ("process_", "python_", BUILD_INFO, "xpuwatch_http_")


@cache
def version() -> str:
    """The installed distribution's version (pyproject ``version``), or "unknown" when not installed."""
    try:
        return metadata.version("xpuwatch")
    except metadata.PackageNotFoundError:
        return "unknown"


def revision(env: Mapping[str, str] | None = None) -> str:
    """Git commit the code was built from: $XPUWATCH_BUILD_REVISION, else the commit pip recorded for a VCS
    install (PEP 610 ``direct_url.json``), else ``git rev-parse HEAD`` of a source checkout, else "unknown"."""
    env = os.environ if env is None else env
    if env.get(REVISION_ENV):
        return env[REVISION_ENV]
    return _installed_revision()


@cache
def _installed_revision() -> str:
    try:
        text = metadata.distribution("xpuwatch").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        text = None
    if text:
        try:
            commit = json.loads(text).get("vcs_info", {}).get("commit_id")
        except ValueError:
            commit = None
        if isinstance(commit, str) and commit:
            return commit
    src = Path(__file__).resolve().parents[1]
    if (src / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
            )
        except (OSError, subprocess.SubprocessError):
            return "unknown"
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    return "unknown"


def describe() -> str:
    """``--version`` text, in the layout of Prometheus' own binaries."""
    return (
        f"xpuwatch, version {version()} (revision: {revision()})\n"
        f"  python version: {platform.python_version()} ({platform.python_implementation()})"
    )


class BuildInfo(Collector):
    """``xpuwatch_build_info{version,revision,python_version} 1``."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._labels = (version(), revision(env), platform.python_version())

    def collect(self) -> Iterator[Metric]:
        fam = GaugeMetricFamily(
            BUILD_INFO,
            "A metric with a constant '1' value labelled by version, revision and python_version from which "
            "xpuwatch was built.",
            labels=("version", "revision", "python_version"),
        )
        fam.add_metric(list(self._labels), 1.0)
        yield fam


def register_standard(registry: CollectorRegistry) -> CollectorRegistry:
    """Add build_info, process_* (Linux /proc), python_info and python_gc_* to a private registry."""
    registry.register(BuildInfo())
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class MissingExtra(ValueError):
    """A setting needs an optional dependency group that is not installed; the message says which
    ``pip install 'xpuwatch[<extra>]'`` brings it. A ValueError: the CLI reports it as a config error."""


def require_extra(extra: str, modules: tuple[str, ...], setting: str) -> None:
    """Raise MissingExtra naming ``setting`` and the extra when one of ``modules`` cannot be imported."""
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing or a broken install
            found = False
        if not found:
            raise MissingExtra(
                f"{setting}: needs the Python module {name!r}, installed with "
                f"pip install 'xpuwatch[{extra}]' (the {extra} extra)"
            )
