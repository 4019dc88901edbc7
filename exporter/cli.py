"""Exporter subcommands: `serve`, `capture`, `inspect`, `metrics-doc` (argument parsing and wiring only)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector as _ClientCollector
from prometheus_client.registry import CollectorRegistry

from xpuwatch.exporter import catalog as C
from xpuwatch.exporter import transcript
from xpuwatch.exporter.attribution import (
    EMPTY,
    AttributionSource,
    Holder,
    MappingStatus,
    MergedAttributionSource,
    StaticAttributionSource,
    TimelineAttributionSource,
)
from xpuwatch.exporter.capture import capture, redact
from xpuwatch.exporter.cgroup import ContainerRef, ProcCgroups, host_proc_root
from xpuwatch.exporter.collector import Collector, families
from xpuwatch.exporter.explain import explain
from xpuwatch.exporter.exposition import ExpositionCache
from xpuwatch.exporter.jobmap import JobMappingSource
from xpuwatch.exporter.podmap import DeviceRef, SliceRef
from xpuwatch.exporter.podsource import KubeletAttributionSource
from xpuwatch.exporter.poller import BackendView, Poller, PollSettings
from xpuwatch.exporter.readers import shipped_readers
from xpuwatch.exporter.reference import render_markdown
from xpuwatch.exporter.selection import Selection, blind
from xpuwatch.exporter.server import Server, ssl_context
from xpuwatch.exporter.settings import ConfigError, Settings, WebConfig, load, load_web_config
from xpuwatch.vendors.base import Backend, DeviceSample, ParseError, overlay
from xpuwatch.vendors.command import (
    MAX_BUNDLE_BYTES,
    TOOLS,
    CommandRunner,
    ReplayRunner,
    SubprocessRunner,
    read_bundle,
    read_regular_file,
    write_bundle,
)
from xpuwatch.vendors.registry import (
    BackendContext,
    OutputFormat,
    all_formats,
    all_specs,
    check_options,
    detect,
)
from xpuwatch.vendors.sim import SimBackend, container_id, pod_uid
from xpuwatch.vendors.untrusted import write_output

log = logging.getLogger("xpuwatch")

DOC_PATH = Path("docs/metrics.md")
SHUTDOWN_WAIT_SECONDS = 2.0
MMAP_THRESHOLD_BYTES = 262144
"""glibc's ``M_MMAP_THRESHOLD`` for the exporter (what the images set as ``MALLOC_MMAP_THRESHOLD_``): every
block above 256 KiB (each rendered /metrics body: 2.6 MiB plain at 512 devices, 9.5 MiB at 2,048) is mapped
on its own and unmapped when freed. Left to glibc, the threshold rises to the largest block freed so far
(up to 32 MiB), bodies are then carved from the heaps of whichever threads rendered them, and RSS steps
between plateaus with the bodies' placement: 77 <-> 83 MiB at 512 devices, 144 <-> 164 MiB at 2,048, where
the fixed threshold keeps 70 and 116 MiB flat over 1,500 polls (docs/exporter.md, issue 36)."""
M_MMAP_THRESHOLD = -3  # glibc malloc.h
SWITCH_INTERVAL_SECONDS = 0.0005
"""The interpreter's thread switch interval while serving (``sys.setswitchinterval``; CPython's default is
5 ms). The poller's thread polls and renders in pure Python for tens to hundreds of milliseconds per poll at
fleet size; the event loop's thread gives the interpreter up at every socket call of a scrape and must wait
up to one switch interval to get it back each time, so a scrape that lands during a poll waited 5 ms several
times over: the gzip tail. 0.5 ms bounds each such wait at a tenth of that, and costs the poller nothing
when nobody else waits (benchmarks/exporter_scrape.py --gzip-runs, issue 36)."""
"""How long shutdown waits for killed vendor tools to be reaped: SIGKILL takes effect at once unless the tool
is in uninterruptible sleep (then it is logged and left; the kubelet's grace period is 30 s)."""


def add_commands(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the exporter",
        description="Run the exporter.",
        epilog="metric selection (as node_exporter's collector flags): --collector.<name> switches a "
        "family or breakdown on, --no-collector.<name> off, --collector.disable-defaults leaves only the "
        "ones switched on (and the xpuwatch_* self-metrics); <name> is a family "
        "(accelerator_sm_occupancy_ratio) or <family>.<breakdown> (accelerator_link_errors_total.link). "
        "Also config metrics: {include, exclude, disable_defaults} and $XPUWATCH_METRICS_INCLUDE/EXCLUDE. "
        "Names: docs/metrics.md.",
    )
    serve.add_argument("--config", help="YAML config file (also $XPUWATCH_CONFIG)")
    serve.add_argument("--simulate", action="store_true", help="serve the built-in simulated fleet")
    serve.add_argument(
        "--sim-config", help="simulator scenario YAML (fleet, timeline of profiles and faults)"
    )
    serve.add_argument("--seed", type=int, help="simulator seed (overrides the scenario's)")
    serve.add_argument(
        "--node-name", help="node label (default: $XPUWATCH_NODE, config, $NODE_NAME, host name)"
    )
    serve.add_argument(
        "--backend",
        action="append",
        default=[],
        metavar="NAME",
        help="enable this backend (repeatable); default: detect what this machine has",
    )
    serve.add_argument("--replay", metavar="BUNDLE", help="serve a capture bundle as if live")
    serve.add_argument("--web.listen-address", dest="listen_address", help="[host]:port (default :9851)")
    serve.add_argument("--web.telemetry-path", dest="telemetry_path", help="metrics path (default /metrics)")
    serve.add_argument(
        "--web.config.file", dest="web_config_file", help="exporter-toolkit web config (TLS, basic auth)"
    )
    serve.add_argument(
        "--job-mapping-dir",
        dest="job_mapping_dir",
        metavar="DIR",
        help="Slurm job mapping directory, dcgm-exporter's --hpc-job-mapping-dir format "
        "(also $XPUWATCH_JOB_MAPPING_DIR, config job_mapping.dir)",
    )
    # Freezes every clock at this Unix time (golden-file tests): not for production use.
    serve.add_argument("--sim-clock", type=float, help=argparse.SUPPRESS)
    serve.set_defaults(func=run_serve)

    cap = sub.add_parser("capture", help="record every detected vendor tool's output into a bundle")
    cap.add_argument("-o", "--output", required=True, metavar="BUNDLE", help="bundle file to write (JSON)")
    cap.add_argument("--redact", action="store_true", help="mask UUIDs, serials, host names and IP addresses")
    cap.add_argument(
        "--backend", action="append", default=[], metavar="NAME", help="capture only these backends"
    )
    cap.add_argument("--node-name", help="node name recorded in the bundle")
    cap.set_defaults(func=run_capture)

    ins = sub.add_parser(
        "inspect", help="print the exposition the exporter would serve for captured tool outputs"
    )
    ins.add_argument("files", nargs="*", metavar="FILE")
    ins.add_argument("--format", help="output format name (default: detect); see --list-formats")
    ins.add_argument("--list-formats", action="store_true", help="list the formats inspect understands")
    ins.add_argument("--node-name", default=None, help="node label (default: $NODE_NAME, else 'inspect')")
    ins.add_argument(
        "--explain",
        action="store_true",
        help="append, as # comments, per device what was not read and why, and the columns not used",
    )
    ins.set_defaults(func=run_inspect)

    doc = sub.add_parser("metrics-doc", help="write docs/metrics.md from the metric catalog")
    doc.add_argument("-o", "--output", default=str(DOC_PATH), help="file to write ('-' for stdout)")
    doc.add_argument("--check", action="store_true", help="exit 1 if the file is not up to date")
    doc.set_defaults(func=run_metrics_doc)


def _fail(msg: str, code: int = 2) -> int:
    print(f"xpuwatch: {msg}", file=sys.stderr)
    return code


# ------------------------------------------------------------------------------------------------------
# serve


@dataclass(frozen=True)
class Clocks:
    """Unix time and monotonic time; both frozen under --sim-clock."""

    wall: Callable[[], float]
    monotonic: Callable[[], float]


def _clocks(frozen: float | None) -> Clocks:
    if frozen is None:
        return Clocks(time.time, time.monotonic)
    return Clocks(lambda: frozen, lambda: 0.0)


@dataclass
class Assembly:
    """A wired exporter: poller, collector, cache, attribution, backends (built by ``assemble``)."""

    node: str
    poller: Poller
    collector: Collector
    cache: ExpositionCache
    attribution: AttributionSource
    backends: list[Backend]
    pod_source: KubeletAttributionSource | None = None
    job_source: JobMappingSource | None = None


def _sim_holder(pod: Any) -> Holder:
    return Holder(pod.namespace, pod.pod, pod.container, pod.workload_kind, pod.owner)


def _sim_attribution(sim: SimBackend, clocks: Clocks) -> AttributionSource:
    seed = sim.scenario.seed
    return TimelineAttributionSource(
        lambda _now: sim.pods(), _sim_holder, clocks.wall, lambda pod: container_id(seed, pod)
    )


def _sim_pid_lookup(sim: SimBackend) -> Callable[[int], ContainerRef | None]:
    """The simulator's stand-in for /proc/<pid>/cgroup: its processes' pods and containers."""

    def lookup(pid: int) -> ContainerRef | None:
        pod = sim.process_pod(pid)
        seed = sim.scenario.seed
        return None if pod is None else ContainerRef(pod_uid(seed, pod), container_id(seed, pod))

    return lookup


def _sim_mapping_status(sim: SimBackend) -> Callable[[], MappingStatus]:
    """The simulator's pod mapping health: refreshed at every poll, every allocated ID matched (the
    unmatched count is exported at 0 per simulated resource, so its panels show a measured zero), no Ascend
    chip reassigned (the reassigned count at 0 per held huawei.com/ resource, as the real exporter has it)."""

    def status() -> MappingStatus:
        return MappingStatus(True, sim.last_refresh(), sim.resources_unmatched(), sim.resources_reassigned())

    return status


def assemble(
    settings: Settings,
    names: Sequence[str],
    clocks: Clocks,
    runner: CommandRunner,
    explicit_node: str | None,
    sim_options: Mapping[str, Any] | None = None,
    attribution: AttributionSource | None = None,
) -> Assembly:
    """Create the named backends and wire them to a poller, collector and exposition cache.

    ``attribution`` is the pod-attribution source (e.g. the kubelet's); None = no pod mapping, except in
    simulation, where the simulator's own pods are used. A Slurm job mapping (``job_mapping.dir``) adds its
    holders to the kubelet's; like the kubelet, it replaces the simulator's own pods. Raises ConfigError for
    an unknown backend or a backend whose options are invalid.
    """
    specs = all_specs()
    for name, section in settings.backends.items():
        if name not in specs:
            raise ConfigError(f"backends.{name}: unknown backend (known: {', '.join(sorted(specs))})")
        try:
            check_options(specs[name], section.options, f"backends.{name}")
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    backends: list[tuple[Backend, PollSettings]] = []
    attribution = attribution or StaticAttributionSource()
    sim: SimBackend | None = None
    node = explicit_node or socket.gethostname()
    for name in names:
        spec = specs.get(name)
        if spec is None:
            known = ", ".join(sorted(specs))
            raise ConfigError(f"{settings.enable_from}: unknown backend {name!r} (known: {known})")
        bs = settings.backend(name)
        options = dict(bs.options)
        if name == "sim":
            options.update({k: v for k, v in (sim_options or {}).items() if v is not None})
            if explicit_node:
                options["node"] = explicit_node
        interval = bs.interval or spec.default_interval_seconds
        # A tool never outlives the poll that started it: its kill deadline is the backend's timeout.
        backend_runner = (
            runner.limited(bs.max_output_bytes, bs.timeout or 2 * interval)
            if isinstance(runner, SubprocessRunner)
            else runner
        )
        ctx = BackendContext(node=node, runner=backend_runner, options=options, clock=clocks.wall)
        try:
            backend = spec.create(ctx)
        except ValueError as exc:
            raise ConfigError(f"backends.{name}: {exc}") from exc
        if isinstance(backend, SimBackend):
            if bs.interval is None:
                interval = backend.scenario.poll_interval
            node = backend.scenario.node
            attribution = _sim_attribution(backend, clocks)
            sim = backend
        timeout = bs.timeout or 2 * interval
        backends.append((backend, PollSettings(interval, timeout, bs.stale_after, spec.supplement)))
    poller = Poller()
    for backend, ps in backends:
        poller.add(backend, ps, clocks.wall, clocks.monotonic)
    pod_source = None
    if settings.pod_mapping.enabled:  # the kubelet is authoritative, also over the simulator's own pods
        pod_source = KubeletAttributionSource(
            settings.pod_mapping, node, lambda: _device_refs(poller, clocks), wall=clocks.wall
        )
        attribution = pod_source
    job_source = None
    if settings.job_mapping.dir:
        job_source = JobMappingSource(
            settings.job_mapping, lambda: _device_refs(poller, clocks), wall=clocks.wall
        )
        # Slurm nodes have no simulated pods: the job mapping is authoritative over them, as the kubelet is.
        attribution = job_source if pod_source is None else MergedAttributionSource(pod_source, job_source)
    job_status = job_source.status if job_source is not None else None
    collector = (
        Collector(
            node,
            poller.view,
            attribution,
            clocks.wall,
            pod_source.status,
            ProcCgroups(host_proc_root(settings.pod_mapping.host_proc)).lookup,
            settings.metrics,
            job_status,
        )
        if pod_source is not None
        else Collector(
            node,
            poller.view,
            attribution,
            clocks.wall,
            _sim_mapping_status(sim),
            _sim_pid_lookup(sim),
            settings.metrics,
        )
        if sim is not None and job_source is None
        else Collector(
            node, poller.view, attribution, clocks.wall, selection=settings.metrics, job_status=job_status
        )
    )
    cache = ExpositionCache(
        collector, standard=True, update_period=min((ps.interval for _, ps in backends), default=None)
    )
    poller.listeners.append(cache.warm)
    return Assembly(
        node, poller, collector, cache, attribution, [b for b, _ in backends], pod_source, job_source
    )


def _device_refs(poller: Poller, clocks: Clocks) -> tuple[list[DeviceRef], list[SliceRef]]:
    """What the pod matcher needs of the devices and slices currently served."""
    devices: list[DeviceRef] = []
    slices: list[SliceRef] = []
    for view in poller.view(clocks.wall()):
        for s in view.samples:
            d = s.device
            devices.append(DeviceRef(d.vendor, d.uuid, d.index, d.pci_bus_id, d.serial, d.aliases))
            slices.extend(SliceRef(sl.parent_uuid, sl.slice_id, sl.uuid) for sl in s.slices)
    return devices, slices


def _check_enable(settings: Settings) -> None:
    """ConfigError for a name in ``enable`` that no backend has, also when --simulate or --replay
    chooses the backends instead (a typo must not pass silently until the next real start)."""
    specs = all_specs()
    for name in settings.enable:
        if name not in specs:
            raise ConfigError(f"enable: unknown backend {name!r} (known: {', '.join(sorted(specs))})")


def _backend_names(args: argparse.Namespace, settings: Settings, runner: CommandRunner) -> list[str]:
    if settings.enable:
        return list(settings.enable)
    enabled, skipped = detect(BackendContext(node=settings.node or "localhost", runner=runner))
    for name, why in skipped:
        log.info("backend %s: skipped (%s)", name, why)
    for name in enabled:
        log.info("backend %s: found", name)
    return enabled


def replayable(listed: Sequence[str], bundle: str) -> list[str]:
    """The bundle's backends a replay can answer from the recorded tool calls. A library backend (nvml,
    dcgm: ``BackendSpec.reads_library``) is skipped with a log line: replaying it would load this machine's
    live library. Raises ConfigError when nothing is left."""
    specs = all_specs()
    names = []
    for name in listed:
        spec = specs.get(name)
        if spec is None:
            raise ConfigError(f"{bundle}: meta.backends names unknown backend {name!r}")
        if not spec.reads_library:
            names.append(name)
        else:
            log.warning("replay: backend %s reads a library, not tool output; not replayed", name)
    if not names:
        raise ConfigError(
            f"{bundle}: the bundle names no backend to replay (library backends cannot be replayed) (meta.backends: {list(listed)})"
        )
    return names


def serve_settings(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[Settings, str | None]:
    """(settings, explicit node) of ``serve`` from its flags and environment (tests/deploy feed each
    DaemonSet's own args and env here). Raises ConfigError."""
    flags = {
        "node": args.node_name,
        "enable": args.backend,
        "listen_address": args.listen_address,
        "telemetry_path": args.telemetry_path,
        "web_config_file": args.web_config_file,
        "job_mapping_dir": getattr(args, "job_mapping_dir", None),
        "metrics": getattr(args, "collectors", None),
    }
    settings = load(args.config, env, flags)
    return settings, settings.node or env.get("NODE_NAME") or None


def _exit_on_sigterm() -> None:
    """Until the event loop takes over, SIGTERM exits through Python (SystemExit), not at once, so that a
    vendor tool run during detection is killed on the way out (SubprocessRunner.run), as on Ctrl-C."""

    def exit_now(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    with contextlib.suppress(ValueError):  # not the main thread (a test calling run_serve)
        signal.signal(signal.SIGTERM, exit_now)


def tune_malloc(env: Mapping[str, str]) -> bool:
    """Set glibc's mmap threshold to ``MMAP_THRESHOLD_BYTES`` unless ``MALLOC_MMAP_THRESHOLD_`` in ``env``
    already chose one (the images set it; a user's value wins). Called first thing by ``serve``, before
    anything large is allocated; the same as the variable from then on. False where it does not apply (no
    glibc ``mallopt``; musl's accepts and ignores it)."""
    if "MALLOC_MMAP_THRESHOLD_" in env:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def run_serve(args: argparse.Namespace) -> int:
    _exit_on_sigterm()
    tune_malloc(os.environ)
    try:
        settings, explicit_node = serve_settings(args, os.environ)
        web_config = load_web_config(settings.web.config_file) if settings.web.config_file else WebConfig()
        if web_config.tls:
            try:
                ssl_context(web_config.tls)
            except (OSError, ValueError) as exc:
                raise ConfigError(f"tls_server_config: cannot load certificate/key: {exc}") from exc
    except ConfigError as exc:
        return _fail(f"config error: {exc}")
    warn_blind(settings.metrics)
    clocks = _clocks(args.sim_clock)
    runner: CommandRunner = SubprocessRunner()
    try:
        if args.simulate:
            if args.backend:
                raise ConfigError("--backend: not with --simulate (the simulator is the only backend then)")
            names = ["sim"]
            _check_enable(settings)  # not used, but a typo in it still fails
        elif args.replay:
            meta, results = read_bundle(Path(args.replay))
            runner = ReplayRunner(results)
            listed = meta.get("backends")
            names = replayable([str(n) for n in listed] if isinstance(listed, list) else [], str(args.replay))
            explicit_node = explicit_node or (str(meta["node"]) if meta.get("node") else None)
        else:
            names = _backend_names(args, settings, runner)
        sim_options = {"config": args.sim_config, "seed": args.seed}
        asm = assemble(settings, names, clocks, runner, explicit_node, sim_options)
    except (ConfigError, ValueError) as exc:
        return _fail(f"config error: {exc}")
    if not names:
        log.warning("no backend enabled: no accelerator found (try --simulate, or --backend NAME)")
    held = (
        b for b in asm.backends if isinstance(b, SimBackend) and b.scenario.timeline_start == "first_scrape"
    )
    on_scrape = next((sim.begin for sim in held), None)
    server = Server(asm.cache, asm.poller, settings.web, web_config, clocks.wall, on_scrape=on_scrape)
    try:
        asyncio.run(_serve(server, asm))
    except OSError as exc:
        return _fail(f"cannot listen on {settings.web.listen_address}: {exc}", 1)
    return 0


def warn_blind(selection: Selection) -> None:
    """Log, at start, each generated alert, recording rule and dashboard panel that reads a family or
    a breakdown label the selection switches off (they would see no data), from the reads indexes that
    `rules generate` and `dashboards generate` write."""
    for what, r in blind(selection, shipped_readers()):
        if (
            what in r.absent_fires
        ):  # an absence alert does not go quiet: it fires for every device that had it
            log.warning(
                "metric selection: %s is off; generated alert %s fires when it disappears: expect it for each "
                "device that reported it, until its lookback passes (silence it, or set its metrics in a user "
                "spec)",
                what,
                r.name,
            )
            continue
        log.warning(
            "metric selection: %s is off; generated %s %s reads it and will see no data", what, r.kind, r.name
        )


def _sighup() -> None:
    log.info("SIGHUP received: ignored; the configuration is read at start only (restart to apply changes)")


async def _serve(server: Server, asm: Assembly) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    with contextlib.suppress(NotImplementedError, AttributeError):
        # Prometheus convention is reload-or-ignore, never die. The config is read at start only (a
        # DaemonSet rolls pods on a ConfigMap change), so SIGHUP is ignored and says so.
        loop.add_signal_handler(signal.SIGHUP, _sighup)
    host, port = await server.start()
    scheme = "https" if server.web_config.tls else "http"
    shown = f"[{host}]" if ":" in host else host
    log.info(
        "listening on %s://%s:%d%s (node %s)", scheme, shown, port, server.settings.telemetry_path, asm.node
    )
    # Everything built so far (modules, catalog, backends, server) lives as long as the process: move it
    # out of the collector's sight, so that a full collection scans only what polls and renders leave
    # behind. Measured at 512 devices (benchmarks/exporter_scrape.py): full collections paused every
    # thread for up to 39 ms; frozen, none exceeded 10 ms over the run.
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    asm.poller.start()
    if asm.pod_source is not None:
        asm.pod_source.start()
    if asm.job_source is not None:
        asm.job_source.start()
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        # In this order, so that no vendor tool outlives the exporter (each runs in its own session, out
        # of reach of the signal that stopped us): no poll cycle starts, no tool starts (a backend that
        # runs the next tool after one failed gets reason=shutdown), the running tools' groups are killed.
        asm.poller.halt()
        killed, left = await asyncio.to_thread(TOOLS.close, SHUTDOWN_WAIT_SECONDS)
        if killed:
            log.info("killed %d running vendor tool(s)", killed)
        if left:
            log.warning(
                "vendor tool(s) %s still running %gs after SIGKILL (stuck in the kernel?)",
                ", ".join(map(str, left)),
                SHUTDOWN_WAIT_SECONDS,
            )
        asm.poller.stop()
        if asm.pod_source is not None:
            asm.pod_source.stop()
        if asm.job_source is not None:
            asm.job_source.stop()
        await server.stop()


# ------------------------------------------------------------------------------------------------------
# capture


def run_capture(args: argparse.Namespace) -> int:
    _exit_on_sigterm()
    runner = SubprocessRunner()
    node = args.node_name or os.environ.get("NODE_NAME") or socket.gethostname()
    specs = all_specs()
    if args.backend:
        unknown = [n for n in args.backend if n not in specs]
        if unknown:
            return _fail(f"--backend: unknown backend(s) {', '.join(unknown)} (known: {', '.join(specs)})")
        names, skipped = list(args.backend), list[tuple[str, str]]()
    else:
        names, skipped = detect(BackendContext(node=node, runner=runner))
    cap = capture([specs[n] for n in names], skipped, runner, node)
    cap.meta["xpuwatch_version"] = _version()
    if args.redact:
        cap = redact(cap, node)
    write_bundle(Path(args.output), cap.results, cap.meta)
    print(
        f"wrote {args.output}: {len(cap.results)} tool call(s) from {', '.join(cap.meta['backends']) or 'no backend'}"
        + (f"; errors: {cap.meta['errors']}" if cap.meta["errors"] else "")
        + ("; redacted" if args.redact else "")
    )
    if not names:
        why = "; ".join(f"{n}: {w}" for n, w in skipped) or "no auto-detectable backend is registered"
        print(f"no vendor tool detected here ({why})", file=sys.stderr)
    return 0


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("xpuwatch")
    except Exception:
        return "unknown"


# ------------------------------------------------------------------------------------------------------
# inspect


class _Static(_ClientCollector):
    def __init__(self, fams: list[Metric]) -> None:
        self._fams = fams

    def collect(self) -> Any:
        return iter(self._fams)


def inspect_files(
    paths: Sequence[str],
    fmt_name: str | None,
    node: str,
    explained: list[str] | None = None,
    notes: list[str] | None = None,
) -> tuple[bytes, list[str]]:
    """(exposition, errors): parse each file with its format and render the device series. With
    ``explained`` (a list), each parsed file's ``exporter.explain`` lines are appended to it. With ``notes``
    (a list), a file that reads but lists no device (``nvidia-smi -q -x`` on a node whose driver sees no
    GPU: ``<attached_gpus>0``) adds a line saying so: not an error, but not silence either.

    A pasted terminal transcript is split into one block per command (``exporter.transcript``): prompt and
    command lines are skipped, each block is read with its own format (``fmt_name`` applies to every block),
    an unreadable block is an error naming the block and the rest still reads. Readings of one device in
    several blocks (``npu-smi info -t board`` then ``-t health``) are overlaid into one sample.
    ``xpuwatch_implausible_readings`` is kept beside the device series: it flags values printed as they are.
    """
    formats = all_formats()
    errors: list[str] = []
    views: list[BackendView] = []
    if fmt_name is not None and fmt_name not in formats:
        errors.append(
            f"--format: unknown format {fmt_name!r} (known: {', '.join(sorted(formats)) or 'none'})"
        )
        paths = ()
    for path in paths:
        try:
            text = read_regular_file(Path(path), MAX_BUNDLE_BYTES).decode("utf-8", errors="replace")
        except OSError as exc:
            errors.append(f"{path}: cannot read: {exc.strerror or exc}")
            continue
        parts = transcript.blocks(text)
        merged: dict[tuple[str, str], DeviceSample] = {}
        names: list[str] = []
        for n, block in enumerate(parts, 1):
            where = path if len(parts) == 1 and block.command is None else _block_name(path, n, block)
            if fmt_name is not None:
                fmt = formats[fmt_name]
                try:
                    samples: tuple[DeviceSample, ...] = tuple(fmt.parse(block.text))
                except ParseError as exc:
                    errors.append(f"{where}: not valid {fmt.name}: {exc}")
                    continue
            else:
                found = detect_format(formats, block.text)
                if isinstance(found, str):
                    errors.append(f"{where}: {_no_output(block) or found}")
                    continue
                fmt, parsed = found
                samples = tuple(parsed)
            samples = _name_by_command(fmt, block, samples)
            if explained is not None:
                explained.extend(explain(where, fmt, block.text, samples))
            names.append(fmt.name)
            for sample in samples:
                key = (sample.device.vendor, sample.device.uuid)
                merged[key] = overlay(merged[key], sample) if key in merged else sample
        if names and not merged and notes is not None:
            notes.append(f"{path}: read as {'+'.join(names)}, which lists no device: nothing to show")
        if names:
            got = tuple(merged.values())
            views.append(BackendView("+".join(names), True, got, len(got), None, None, {}, 0, True))
    fams = [
        f
        for f in families(node, views, EMPTY, None)
        if not f.name.startswith("xpuwatch_") or f.name == C.IMPLAUSIBLE
    ]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Static(fams))
    return generate_latest(registry), errors


def _name_by_command(
    fmt: OutputFormat, block: transcript.Block, samples: tuple[DeviceSample, ...]
) -> tuple[DeviceSample, ...]:
    """Samples of an output that names no device (empty uuid) get the device the transcript's command line
    selects, when the format knows how to read it (``OutputFormat.named_by_command``)."""
    if block.command is None or fmt.named_by_command is None:
        return samples
    try:
        device = fmt.named_by_command(block.command)
    except Exception:  # a format's helper must not cost the file: the sample keeps its empty identity
        log.warning("inspect: %s could not read the device from %r", fmt.name, block.command[:120])
        return samples
    if device is None:
        return samples
    return tuple(dataclasses.replace(s, device=device) if not s.device.uuid else s for s in samples)


def _no_output(block: transcript.Block) -> str | None:
    """For a pasted command whose output is a few lines no format claims (``Invalid card id.``, a usage
    text): say the tool printed no device output, quoting its first line, instead of suggesting --format."""
    lines = [ln.strip() for ln in block.text.splitlines() if ln.strip()]
    if block.command is None or len(lines) > 6:
        return None
    first = lines[0][:120] if lines else "nothing"
    return f"the command printed no device output ({first!r}): nothing to read"


def _block_name(path: str, n: int, block: transcript.Block) -> str:
    """How errors and ``--explain`` name one block of a transcript: ``FILE block 2 (`npu-smi info -t health`,
    line 12)``."""
    cmd = f"`{block.command[:120]}`" if block.command else "text before the first command"
    return f"{path} block {n} ({cmd}, line {block.line})"


def detect_format(
    formats: Mapping[str, OutputFormat], text: str
) -> tuple[OutputFormat, Sequence[DeviceSample]] | str:
    """(format, samples) of ``text``: the first format (by name) whose sniffer claims it and whose parser
    reads it. When none does, a one-line reason naming what was tried: each claiming format with its
    parse error (one: ``not valid NAME: why``), else every known format, and ``pass --format NAME``."""
    claimed = [f for _, f in sorted(formats.items()) if _sniff(f.sniff, text)]
    failed: list[tuple[str, str]] = []
    for fmt in claimed:
        try:
            return fmt, fmt.parse(text)
        except ParseError as exc:
            failed.append((fmt.name, str(exc)))
    if len(failed) == 1:
        return f"not valid {failed[0][0]}: {failed[0][1]}"
    if failed:
        tried = "; ".join(f"{name}: {why[:80]}" for name, why in failed)
        return f"looks like {len(failed)} formats, none reads it ({tried}); pass --format NAME"
    names = ", ".join(sorted(formats)) or "none"
    return f"no known format matches (tried {len(formats)}: {names}); pass --format NAME"


def _sniff(fn: Callable[[str], bool], text: str) -> bool:
    try:
        return bool(fn(text))
    except Exception:
        return False


def run_inspect(args: argparse.Namespace) -> int:
    if args.list_formats:
        for name in sorted(all_formats()):
            print(name)
        return 0
    if not args.files:
        return _fail("inspect: give one or more FILEs (or --list-formats)")
    node = args.node_name or os.environ.get("NODE_NAME") or "inspect"
    explained: list[str] | None = [] if args.explain else None
    notes: list[str] = []
    body, errors = inspect_files(args.files, args.format, node, explained, notes)
    for n in notes:
        print(f"xpuwatch inspect: {n}", file=sys.stderr)
    for e in errors:
        print(f"xpuwatch inspect: {e}", file=sys.stderr)
    sys.stdout.write(body.decode("utf-8"))
    if explained:
        sys.stdout.write("\n".join(explained) + "\n")
    return 1 if errors else 0


# ------------------------------------------------------------------------------------------------------
# metrics-doc


def run_metrics_doc(args: argparse.Namespace) -> int:
    text = render_markdown()
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    path = Path(args.output)
    if args.check:
        if not path.exists():
            return _fail(f"{path} not found (run from the repository root, or pass -o)", 1)
        if path.read_text(encoding="utf-8") != text:
            return _fail(f"{path} is stale: run `xpuwatch metrics-doc -o {path}`", 1)
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    write_output(path, text)
    print(f"wrote {path}")
    return 0
