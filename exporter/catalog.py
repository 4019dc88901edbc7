"""The metric catalog: every name xpuwatch exports, with type, unit, labels, help and source.

This table is the schema contract. The collector renders from it, ``docs/metrics.md`` is generated from it,
and ``alerts/`` and ``dashboards/`` import names from it instead of retyping them. Vendor-only metrics
(``accelerator_<vendor>_<name>``) are declared by their backend and appended by ``catalog()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from xpuwatch.vendors.registry import all_vendor_metrics

MetricType = Literal["gauge", "counter", "info"]

# Labels on every device series. Pod labels (namespace, pod, container) are added by attribution when one
# container holds the device, job labels (job_id, job_user, job_partition) when one Slurm job does; see
# accelerator_allocated for shared devices.
DEVICE_LABELS: tuple[str, ...] = ("node", "vendor", "model", "device", "uuid")
POD_LABELS: tuple[str, ...] = ("namespace", "pod", "container")
JOB_LABELS: tuple[str, ...] = ("job_id", "job_user", "job_partition")
SLICE_LABELS: tuple[str, ...] = (
    "node",
    "vendor",
    "model",
    "device",
    "uuid",
    "slice_id",
    "profile",
    "slice_kind",
)


@dataclass(frozen=True)
class MetricDef:
    """One metric family. ``labels`` are the family's own labels beyond the identity labels
    (``DEVICE_LABELS`` for ``scope="device"``, ``SLICE_LABELS`` for ``"slice"``, none for ``"exporter"``)."""

    name: str
    type: MetricType
    unit: str  # base unit, "" for dimensionless counts/states, "ratio" for 0..1
    help: str
    source: str  # where the number comes from, per vendor
    scope: Literal["device", "slice", "exporter"] = "device"
    labels: tuple[str, ...] = ()

    @property
    def identity_labels(self) -> tuple[str, ...]:
        return {"device": DEVICE_LABELS, "slice": SLICE_LABELS, "exporter": ()}[self.scope]


def _g(
    name: str, unit: str, help: str, source: str, labels: tuple[str, ...] = (), scope: str = "device"
) -> MetricDef:
    return MetricDef(name, "gauge", unit, help, source, scope, labels)  # type: ignore[arg-type]


def _c(
    name: str, unit: str, help: str, source: str, labels: tuple[str, ...] = (), scope: str = "device"
) -> MetricDef:
    return MetricDef(name, "counter", unit, help, source, scope, labels)  # type: ignore[arg-type]


# Names as constants: alerts/ and dashboards/ import these.
UP = "accelerator_up"
INFO = "accelerator_info"
UTILIZATION = "accelerator_utilization_ratio"
SM_ACTIVE = "accelerator_sm_active_ratio"
SM_OCCUPANCY = "accelerator_sm_occupancy_ratio"
TENSOR_ACTIVE = "accelerator_tensor_active_ratio"
MEMORY_BANDWIDTH = "accelerator_memory_bandwidth_utilization_ratio"
MEMORY_USED = "accelerator_memory_used_bytes"
MEMORY_TOTAL = "accelerator_memory_total_bytes"
MEMORY_USED_RATIO = "accelerator_memory_used_ratio"
TEMPERATURE = "accelerator_temperature_celsius"
POWER = "accelerator_power_watts"
POWER_LIMIT = "accelerator_power_limit_watts"
ENERGY = "accelerator_energy_joules_total"
CLOCK = "accelerator_clock_hertz"
CLOCK_THROTTLED = "accelerator_clock_throttled"
ECC_ERRORS = "accelerator_ecc_errors_total"
REMAPPED_ROWS = "accelerator_memory_remapped_rows"
REMAP_PENDING = "accelerator_memory_remap_pending"
REMAP_FAILED = "accelerator_memory_remap_failed"
FAULT_EVENTS = "accelerator_fault_events_total"
PCIE_REPLAY = "accelerator_pcie_replay_errors_total"
LINK_ERRORS = "accelerator_link_errors_total"
HEALTH = "accelerator_health"
ALLOCATED = "accelerator_allocated"
CONTAINER_MEMORY_USED = "accelerator_container_memory_used_bytes"
SLICE_INFO = "accelerator_slice_info"
PARTITION_INFO = "accelerator_partition_info"
SLICE_MEMORY_USED = "accelerator_slice_memory_used_bytes"
SLICE_MEMORY_LIMIT = "accelerator_slice_memory_limit_bytes"
SLICE_COMPUTE_LIMIT = "accelerator_slice_compute_limit_ratio"
SLICE_UTILIZATION = "accelerator_slice_utilization_ratio"
SLICE_SM_ACTIVE = "accelerator_slice_sm_active_ratio"
SLICE_SM_OCCUPANCY = "accelerator_slice_sm_occupancy_ratio"
IMPLAUSIBLE = "xpuwatch_implausible_readings"
BACKEND_UP = "xpuwatch_backend_up"
BACKEND_POLL_DURATION = "xpuwatch_backend_poll_duration_seconds"
BACKEND_ERRORS = "xpuwatch_backend_errors_total"
BACKEND_LAST_SUCCESS = "xpuwatch_backend_last_success_timestamp_seconds"
BACKEND_DEVICES = "xpuwatch_backend_devices"
POD_MAPPING_UP = "xpuwatch_pod_mapping_up"
POD_MAPPING_LAST_SUCCESS = "xpuwatch_pod_mapping_last_success_timestamp_seconds"
POD_MAPPING_UNMATCHED = "xpuwatch_pod_mapping_unmatched_ids"
RENDER_SERIES = "xpuwatch_render_series"
POD_MAPPING_REASSIGNED = "xpuwatch_pod_mapping_reassigned_ids"
JOB_MAPPING_UP = "xpuwatch_job_mapping_up"
JOB_MAPPING_LAST_SUCCESS = "xpuwatch_job_mapping_last_success_timestamp_seconds"
JOB_MAPPING_UNMATCHED = "xpuwatch_job_mapping_unmatched_files"

NV = "NVIDIA"
_CORE: tuple[MetricDef, ...] = (
    _g(
        UP,
        "",
        "1 if the device answered at the last poll, 0 if it is known but failing (lost, timed out).",
        "every backend: the device was read without a device-level error",
    ),
    MetricDef(
        INFO,
        "info",
        "",
        "Static identity of the device (value 1): driver version, PCI bus id, serial.",
        "NVML nvmlSystemGetDriverVersion/nvmlDeviceGetPciInfo/nvmlDeviceGetSerial; vendor tools' identity fields",
        "device",
        ("driver_version", "pci_bus_id", "serial"),
    ),
    _g(
        UTILIZATION,
        "ratio",
        "Fraction of time the compute engine was busy over the vendor's sample period (0..1).",
        f"{NV}: nvmlDeviceGetUtilizationRates.gpu (GPU-Util); AMD: gfx_activity; Ascend: AI Core usage; others: their tool's utilization",
    ),
    _g(
        SM_ACTIVE,
        "ratio",
        "Fraction of cycles at least one warp was resident on an SM, averaged over SMs (0..1).",
        f"{NV}: DCGM_FI_PROF_SM_ACTIVE (1002)",
    ),
    _g(
        SM_OCCUPANCY,
        "ratio",
        "Resident warps as a fraction of the maximum, averaged over SMs (0..1).",
        f"{NV}: DCGM_FI_PROF_SM_OCCUPANCY (1003)",
    ),
    _g(
        TENSOR_ACTIVE,
        "ratio",
        "Fraction of cycles the tensor (matrix) pipes were active (0..1).",
        f"{NV}: DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (1004)",
    ),
    _g(
        MEMORY_BANDWIDTH,
        "ratio",
        "Fraction of time/cycles the device-memory interface was busy (0..1).",
        f"{NV}: DCGM_FI_PROF_DRAM_ACTIVE (1005), else NVML utilization.memory; AMD: umc_activity; Ascend: HBM bandwidth usage",
    ),
    _g(
        MEMORY_USED,
        "bytes",
        "Device memory in use (framebuffer/HBM/VRAM).",
        f"{NV}: nvmlDeviceGetMemoryInfo.used; AMD: vram used; Ascend: HBM/DDR usage; MiB/MB converted to bytes",
    ),
    _g(
        MEMORY_TOTAL,
        "bytes",
        "Device memory capacity (framebuffer/HBM/VRAM).",
        f"{NV}: nvmlDeviceGetMemoryInfo.total; AMD: vram total; Ascend: HBM/DDR capacity",
    ),
    _g(
        MEMORY_USED_RATIO,
        "ratio",
        "Share of device memory in use (0..1), only for devices whose tool prints a percentage and no bytes; "
        "alerts and dashboards use it where accelerator_memory_used_bytes is absent.",
        "Hygon: hy-smi / DTK rocm-smi VRAM% column, hy-smi --json 'DCU|HCU memory use (%)' (when "
        "hy-smi --showmeminfo vram gives no bytes); AMD: rocm-smi 'GPU Memory Allocated (VRAM%)' without bytes",
    ),
    _g(
        TEMPERATURE,
        "celsius",
        "Temperature by sensor: core (GPU die/edge), memory (HBM), hotspot (junction), edge (beside a named core).",
        f"{NV}: nvmlDeviceGetTemperature(GPU), field NVML_FI_DEV_MEMORY_TEMP; AMD: edge/junction/memory; Ascend: chip temperature",
        ("sensor",),
    ),
    _g(
        POWER,
        "watts",
        "Current power draw of the device (board or socket, as the vendor reports).",
        f"{NV}: nvmlDeviceGetPowerUsage (mW); AMD: socket_power; Ascend: chip/NPU power",
    ),
    _g(
        POWER_LIMIT,
        "watts",
        "Enforced power limit (cap) of the device.",
        f"{NV}: nvmlDeviceGetEnforcedPowerLimit (mW); AMD: power_cap",
    ),
    _c(
        ENERGY,
        "joules",
        "Energy consumed since the driver was loaded.",
        f"{NV}: nvmlDeviceGetTotalEnergyConsumption (mJ); AMD: energy accumulator",
    ),
    _g(
        CLOCK,
        "hertz",
        "Current clock frequency by domain.",
        f"{NV}: nvmlDeviceGetClockInfo(GRAPHICS|SM|MEM) (MHz)",
        ("clock",),
    ),
    _g(
        CLOCK_THROTTLED,
        "",
        "1 while the named clock-event (throttle) reason is active, else 0.",
        f"{NV}: nvmlDeviceGetCurrentClocksEventReasons bitmask, decoded per reason",
        ("reason",),
    ),
    _c(
        ECC_ERRORS,
        "",
        "Device-memory ECC errors since the driver was loaded, by type (corrected = SBE, uncorrected = DBE).",
        f"{NV}: nvmlDeviceGetTotalEccErrors(CORRECTED|UNCORRECTED, VOLATILE); AMD: ecc correctable/uncorrectable",
        ("type",),
    ),
    _g(
        REMAPPED_ROWS,
        "",
        "Memory rows remapped (or pages retired, on GPUs before row remapping), by error type.",
        f"{NV}: nvmlDeviceGetRemappedRows, else nvmlDeviceGetRetiredPages",
        ("type",),
    ),
    _g(
        REMAP_PENDING,
        "",
        "1 when a row remap (or page retirement) is pending a GPU reset.",
        f"{NV}: nvmlDeviceGetRemappedRows.isPending / nvmlDeviceGetRetiredPagesPendingStatus",
    ),
    _g(
        REMAP_FAILED,
        "",
        "1 when a row remap failed (the GPU should be replaced or reset).",
        f"{NV}: nvmlDeviceGetRemappedRows.failureOccurred",
    ),
    _c(
        FAULT_EVENTS,
        "",
        "Driver fault events by vendor code (NVIDIA XID; Ascend error code), present at 0 before the first event.",
        f"{NV}: NVML event API nvmlEventTypeXidCriticalError, eventData = XID; Ascend: npu-smi health error codes",
        ("code",),
    ),
    _c(
        PCIE_REPLAY,
        "",
        "PCIe link replays (retransmissions) since the driver was loaded.",
        f"{NV}: nvmlDeviceGetPcieReplayCounter; AMD: pcie replay count",
    ),
    _c(
        LINK_ERRORS,
        "",
        "Interconnect link errors by link and type (NVLink crc_flit, crc_data, replay, recovery).",
        f"{NV}: nvmlDeviceGetNvLinkErrorCounter",
        ("link", "type"),
    ),
    _g(
        HEALTH,
        "",
        "1 when the subsystem reports healthy, 0 when failed or warning.",
        f"{NV}: DCGM health watches; Ascend: npu-smi health (OK=1); others: their tool's health field",
        ("subsystem",),
    ),
    MetricDef(
        ALLOCATED,
        "gauge",
        "",
        "1 while a container holds the device (from the kubelet PodResources API); labelled with the holder, "
        "plus label_<key> / annotation_<key> for the pod labels and annotations allow-listed in "
        "pod_mapping.label_allowlist / annotation_allowlist, and owner_kind with pod_mapping.owner_kind "
        "(none by default; at most 8 together, values cut at 128 characters). 1 while a Slurm job holds it "
        "(job_mapping): job_id, job_user, job_partition, workload_kind job, owner the job's user, empty "
        "namespace/pod/container.",
        "kubelet PodResources v1 List, enriched from the Kubernetes API; Slurm: the job mapping directory "
        "(dcgm-exporter's --hpc-job-mapping-dir format) the prolog/epilog write",
        "device",
        ("namespace", "pod", "container", "workload_kind", "owner", *JOB_LABELS),
    ),
    _g(
        CONTAINER_MEMORY_USED,
        "bytes",
        "Device memory held by the processes of one container on the device; processes in no container "
        '(Xorg, host daemons) or in a container the pod list does not name are summed under container="".',
        f"{NV}: nvmlDeviceGetComputeRunningProcesses + nvmlDeviceGetGraphicsRunningProcesses usedGpuMemory; "
        "Ascend: npu-smi info process table Process memory(MB); AMD: amdsmi_get_gpu_process_list "
        "memory_usage.vram_mem (amd-smi process --json with the processes option); "
        "pid -> container through the host's "
        "/proc/<pid>/cgroup and the pods' status.containerStatuses (with pod_mapping enabled)",
        ("namespace", "pod", "container"),
    ),
    MetricDef(
        PARTITION_INFO,
        "info",
        "",
        "The partition mode of the physical card this device is part of (value 1): the device `uuid` is "
        "logical GPU `partition_id` of the card `parent_uuid` (the uuid of the card's partition 0), in "
        "compute mode `compute_partition` (SPX, DPX, QPX, CPX) and memory mode `memory_partition` (NPS1, "
        "NPS4). Sum card-wide readings (power, memory) by `parent_uuid`, not by `uuid`.",
        "AMD: amdsmi_get_gpu_compute_partition/memory_partition and kfd_info current_partition_id; "
        "amd-smi static --json partition section; amd-smi default table Partition-Mode; rocm-smi "
        "Partitions (Mem, Compute, ID); partitions of one card grouped by PCI domain:bus:device",
        "device",
        ("parent_uuid", "partition_id", "compute_partition", "memory_partition"),
    ),
    MetricDef(
        SLICE_INFO,
        "info",
        "",
        "A MIG instance or vGPU share of the physical device `uuid` (value 1).",
        f"{NV}: NVML MIG device handles and GPU instance profiles; HAMi vGPU allocations; Ascend: npu-smi info -t "
        "info-vnpu (slice_kind vnpu: Vnpu ID, template)",
        "slice",
        ("slice_uuid",),
    ),
    _g(
        SLICE_MEMORY_USED,
        "bytes",
        "Device memory used inside the slice.",
        f"{NV}: nvmlDeviceGetMemoryInfo on the MIG device handle; HAMi: usage",
        scope="slice",
    ),
    _g(
        SLICE_MEMORY_LIMIT,
        "bytes",
        "Device memory the slice may use (MIG instance size or vGPU memory limit).",
        f"{NV}: MIG GPU instance memory size; HAMi: nvidia.com/gpumem; Ascend vNPU: the template's _<n>g (GiB)",
        scope="slice",
    ),
    _g(
        SLICE_COMPUTE_LIMIT,
        "ratio",
        "Share of the parent device's compute the slice may use (0..1).",
        f"{NV}: MIG slice count / 7 (A100/H100); HAMi: nvidia.com/gpucores / 100; Ascend vNPU: template AI cores / "
        "the chip's AICORE total",
        scope="slice",
    ),
    _g(
        SLICE_UTILIZATION,
        "ratio",
        "Fraction of time the slice's engines were busy (0..1).",
        f"{NV}: DCGM_FI_PROF_GR_ENGINE_ACTIVE per GPU instance; HAMi: core usage",
        scope="slice",
    ),
    _g(
        SLICE_SM_ACTIVE,
        "ratio",
        "SM activity inside the slice (0..1).",
        f"{NV}: DCGM_FI_PROF_SM_ACTIVE per GPU instance",
        scope="slice",
    ),
    _g(
        SLICE_SM_OCCUPANCY,
        "ratio",
        "SM occupancy inside the slice (0..1).",
        f"{NV}: DCGM_FI_PROF_SM_OCCUPANCY per GPU instance",
        scope="slice",
    ),
    _g(
        IMPLAUSIBLE,
        "",
        "Readings of the device exported as printed although no working device can have them, by reason "
        "(used_above_total, ratio_above_one, negative_power, temperature_above_150c, negative_value); a series "
        "only while non-zero.",
        "xpuwatch collector (exporter/plausibility.py) over every backend's readings",
        ("reason",),
    ),
    _g(
        BACKEND_UP,
        "",
        "1 if the backend's last poll succeeded and its data is fresh, else 0.",
        "xpuwatch poller",
        ("backend",),
        "exporter",
    ),
    _g(
        BACKEND_POLL_DURATION,
        "seconds",
        "Duration of the backend's last completed poll.",
        "xpuwatch poller",
        ("backend",),
        "exporter",
    ),
    _c(
        BACKEND_ERRORS,
        "",
        "Failed polls (or partial failures) of the backend, by reason.",
        "xpuwatch poller",
        ("backend", "reason"),
        "exporter",
    ),
    _g(
        BACKEND_LAST_SUCCESS,
        "seconds",
        "Unix time of the backend's last successful poll.",
        "xpuwatch poller",
        ("backend",),
        "exporter",
    ),
    _g(
        BACKEND_DEVICES,
        "",
        "Devices the backend knows, answering or not.",
        "xpuwatch poller",
        ("backend",),
        "exporter",
    ),
    _g(
        POD_MAPPING_UP,
        "",
        "1 if the last kubelet PodResources refresh succeeded, else 0.",
        "kubelet PodResources v1 List",
        (),
        "exporter",
    ),
    _g(
        POD_MAPPING_LAST_SUCCESS,
        "seconds",
        "Unix time of the last successful pod mapping refresh; pod labels are kept for pod_mapping.grace "
        "seconds after it (age: time() - this).",
        "kubelet PodResources v1 List",
        (),
        "exporter",
    ),
    _g(
        POD_MAPPING_UNMATCHED,
        "",
        "Allocated device IDs (DRA claim devices as resource dra:<driver>) that matched no exported device "
        "or slice at the last successful refresh; never attributed by guess.",
        "kubelet PodResources v1 List: device_ids, dynamic_resources",
        ("resource",),
        "exporter",
    ),
    _g(
        POD_MAPPING_REASSIGNED,
        "",
        "Allocated device IDs whose holder was moved to another device at the last successful refresh, because "
        "the device plugin's pod annotation names a different device than the kubelet recorded (Ascend: "
        "MindCluster's huawei.com/AscendReal vs huawei.com/kltDev); present at 0 per resource with a "
        "reassigning plugin in use.",
        "Kubernetes API pod annotations huawei.com/AscendReal and huawei.com/kltDev (MindCluster Ascend "
        "Device Plugin, written in updatePodAnnotation); kubelet PodResources v1 List device_ids",
        ("resource",),
        "exporter",
    ),
    _g(
        JOB_MAPPING_UP,
        "",
        "1 if the last read of the Slurm job mapping directory succeeded, else 0.",
        "job_mapping.dir (exporter.jobmap)",
        (),
        "exporter",
    ),
    _g(
        JOB_MAPPING_LAST_SUCCESS,
        "seconds",
        "Unix time the last successful read of the job mapping directory began (the labels show the "
        "directory as it was then or later); job labels are kept for job_mapping.grace seconds after it "
        "(age: time() - this).",
        "job_mapping.dir (exporter.jobmap)",
        (),
        "exporter",
    ),
    _g(
        JOB_MAPPING_UNMATCHED,
        "",
        "Mapping files at the last successful read whose name (device index, or index.gpu_instance for MIG) "
        "names no exported device or slice, or more than one device; never attributed by guess.",
        "job_mapping.dir (exporter.jobmap)",
        (),
        "exporter",
    ),
    _g(
        RENDER_SERIES,
        "",
        "Series the exporter's accelerator and self-metric families hold in this render, this one included "
        "(not the process_/python_/build-info families): what a scrape of this exporter costs the TSDB.",
        "xpuwatch collector (exporter.collector), after metric selection (metrics.include/exclude)",
        (),
        "exporter",
    ),
)


@dataclass(frozen=True)
class Breakdown:
    """A label of ``family`` that multiplies its series and can be switched off on its own (selection name
    ``<family>.<name>``). Off, the family keeps one series per remaining label set: the values of the
    series that differed only in ``labels`` combined by ``aggregate`` (``sum`` for counters and amounts,
    ``max`` for 0/1 states: 1 while any is 1)."""

    family: str
    name: str
    labels: tuple[str, ...]
    aggregate: Literal["sum", "max"]
    default: bool
    why: str

    @property
    def key(self) -> str:
        return f"{self.family}.{self.name}"


BREAKDOWNS: tuple[Breakdown, ...] = (
    Breakdown(
        LINK_ERRORS,
        "link",
        ("link",),
        "sum",
        False,
        "one series per NVLink and error type (48 per A100, 72 per H100); no generated alert or panel reads "
        "the link (they sum without it), so by default the errors are summed over links per error type",
    ),
    Breakdown(
        CLOCK_THROTTLED,
        "reason",
        ("reason",),
        "max",
        True,
        "9 reasons per NVIDIA GPU; the throttle alerts and the device dashboard read the reason. Off: one "
        "series per device, 1 while any reason is active",
    ),
    Breakdown(
        FAULT_EVENTS,
        "code",
        ("code",),
        "sum",
        True,
        "one series per XID / error code, present at 0 before the first event; the fault alerts and "
        "panels read the code. Off: all fault events of the device summed",
    ),
    Breakdown(
        CONTAINER_MEMORY_USED,
        "container",
        ("namespace", "pod", "container"),
        "sum",
        True,
        "one series per container with processes on the device (per process, summed per container); off: "
        "the device memory held by processes, summed per device",
    ),
)


def catalog() -> tuple[MetricDef, ...]:
    """Every metric family: the core schema followed by vendor-only metrics declared by backends."""
    vendor = tuple(
        MetricDef(m.name, m.type, m.unit, m.help, m.source, "device") for m in all_vendor_metrics()
    )
    return _CORE + vendor


def by_name() -> dict[str, MetricDef]:
    return {m.name: m for m in catalog()}


# --- The services' own metrics -------------------------------------------------------------------------
# The relay and the remediation controller serve these about themselves on their own /metrics. They live
# here, below every room, because the meta alerts (alerts/rules.py) and the operations dashboard read them:
# the rule builder must not import the services it watches. Not part of ``catalog()`` (the exporter's
# schema and docs/metrics.md).


@dataclass(frozen=True)
class ServiceMetric:
    """One family a service declares with prometheus-client. ``name`` is the exposed name (counters end in
    ``_total``, which prometheus-client appends to the declared name); ``labels`` in declaration order."""

    name: str
    type: Literal["counter", "gauge"]
    labels: tuple[str, ...]
    help: str

    @property
    def declared(self) -> str:
        """The name to give prometheus-client (it adds ``_total`` to counters itself)."""
        return self.name.removesuffix("_total") if self.type == "counter" else self.name


_CH = ("channel",)

RELAY_RECEIVED = ServiceMetric(
    "xpuwatch_relay_notifications_received_total",
    "counter",
    _CH,
    "Alertmanager notifications accepted into the outbox.",
)
RELAY_ALERTS_RECEIVED = ServiceMetric(
    "xpuwatch_relay_alerts_received_total", "counter", _CH, "Alerts in accepted notifications."
)
RELAY_DEDUPLICATED = ServiceMetric(
    "xpuwatch_relay_notifications_deduplicated_total",
    "counter",
    _CH,
    "Notifications repeating one seen within the dedup window (nothing sent).",
)
RELAY_ENQUEUED = ServiceMetric(
    "xpuwatch_relay_messages_enqueued_total",
    "counter",
    _CH,
    "Messages (parts and follow-ups) stored for delivery.",
)
RELAY_DELIVERED = ServiceMetric(
    "xpuwatch_relay_messages_delivered_total", "counter", _CH, "Messages the bot accepted (errcode/code 0)."
)
RELAY_FAILED = ServiceMetric(
    "xpuwatch_relay_messages_failed_total",
    "counter",
    ("channel", "reason"),
    "Messages given up, by reason (bot code, http_<status>, expired, unconfirmed, channel_removed,"
    " render_failed).",
)
RELAY_RETRIES = ServiceMetric(
    "xpuwatch_relay_send_retries_total",
    "counter",
    ("channel", "reason"),
    "Send attempts to retry later, by reason (rate limit code, http_<status>, timeout).",
)
RELAY_REJECTED = ServiceMetric(
    "xpuwatch_relay_requests_rejected_total",
    "counter",
    ("reason",),
    "Inbound requests refused, by reason (unauthorized, too_large, malformed, unknown_channel,"
    " store_failed, render_failed, body_timeout).",
)
RELAY_FALLBACKS = ServiceMetric(
    "xpuwatch_relay_render_fallbacks_total",
    "counter",
    _CH,
    "Notifications rendered with the built-in templates after a template override failed.",
)
RELAY_SUMMARISED = ServiceMetric(
    "xpuwatch_relay_alerts_summarised_total",
    "counter",
    _CH,
    "Alerts summarised as 'N more alerts' instead of listed.",
)
RELAY_INGEST_COMMITS = ServiceMetric(
    "xpuwatch_relay_ingest_commits_total",
    "counter",
    (),
    "Outbox transactions that stored incoming notifications (committed or failed); concurrent webhooks"
    " share one (group commit), so received notifications / commits is the mean batch.",
)
RELAY_OUTBOX_ERRORS = ServiceMetric(
    "xpuwatch_relay_outbox_errors_total",
    "counter",
    (),
    "Outbox reads or writes that failed in the sender (disk full, corrupt pages, I/O errors).",
)
RELAY_QUEUE_DEPTH = ServiceMetric(
    "xpuwatch_relay_queue_depth", "gauge", _CH, "Messages waiting in the outbox."
)
RELAY_OLDEST_AGE = ServiceMetric(
    "xpuwatch_relay_oldest_pending_age_seconds",
    "gauge",
    _CH,
    "Age of the oldest pending message (0 when none), seconds.",
)
RELAY_OUTBOX_UP = ServiceMetric(
    "xpuwatch_relay_outbox_up", "gauge", (), "1 if the outbox could be read at this scrape, else 0."
)

REMEDIATION_ACTIONS = ServiceMetric(
    "xpuwatch_remediation_actions_total",
    "counter",
    ("action", "result", "mode"),
    "Remediation steps executed, by action, result (ok|failed|blocked|skipped) and mode (apply|dry-run).",
)
REMEDIATION_DECISIONS = ServiceMetric(
    "xpuwatch_remediation_decisions_total",
    "counter",
    ("action", "step"),
    "Policy decisions by action and step (including ignore and wait).",
)
REMEDIATION_REFUSALS = ServiceMetric(
    "xpuwatch_remediation_guard_refusals_total",
    "counter",
    ("reason",),
    "Decisions refused by the guard, by reason.",
)
REMEDIATION_ALERTS = ServiceMetric(
    "xpuwatch_remediation_alerts_received_total",
    "counter",
    ("status",),
    "Alerts received in webhook payloads, by status.",
)
REMEDIATION_WEBHOOK = ServiceMetric(
    "xpuwatch_remediation_webhook_requests_total",
    "counter",
    ("code",),
    "Webhook requests by HTTP status code.",
)
REMEDIATION_ERRORS = ServiceMetric(
    "xpuwatch_remediation_errors_total",
    "counter",
    ("component",),
    "Failures talking to the API server, JupyterHub, notebooks or the relay, by component.",
)
REMEDIATION_RECHECKS = ServiceMetric(
    "xpuwatch_remediation_rechecks_total",
    "counter",
    ("action", "step", "result"),
    "Re-checks of the alert in Prometheus right before a disruptive step, by action, step and result "
    "(holds: acted; cleared: cancelled; unreachable: Prometheus not asked, unreadable: its answer not read; "
    "both: not acted, fail safe).",
)
REMEDIATION_LEADER = ServiceMetric(
    "xpuwatch_remediation_leader", "gauge", (), "1 while this replica holds the Lease."
)
REMEDIATION_HELD_AGE = ServiceMetric(
    "xpuwatch_remediation_held_node_age_seconds",
    "gauge",
    ("node", "action"),
    "Seconds since xpuwatch tainted (drain) or cordoned (resize) the node, one series per node it holds.",
)
REMEDIATION_MAX_HOLD = ServiceMetric(
    "xpuwatch_remediation_max_hold_seconds",
    "gauge",
    (),
    "guard.max_hold_seconds: a node held longer is paged to a human.",
)
REMEDIATION_DISRUPTED = ServiceMetric(
    "xpuwatch_remediation_disrupted_nodes", "gauge", (), "Nodes currently cordoned or tainted by xpuwatch."
)

RELAY_METRICS: tuple[ServiceMetric, ...] = (
    RELAY_RECEIVED,
    RELAY_ALERTS_RECEIVED,
    RELAY_DEDUPLICATED,
    RELAY_ENQUEUED,
    RELAY_DELIVERED,
    RELAY_FAILED,
    RELAY_RETRIES,
    RELAY_REJECTED,
    RELAY_FALLBACKS,
    RELAY_SUMMARISED,
    RELAY_INGEST_COMMITS,
    RELAY_OUTBOX_ERRORS,
    RELAY_QUEUE_DEPTH,
    RELAY_OLDEST_AGE,
    RELAY_OUTBOX_UP,
)
"""Every family of the relay's /metrics beyond xpuwatch_build_info, process_*, python_* and HTTP metrics."""
REMEDIATION_METRICS: tuple[ServiceMetric, ...] = (
    REMEDIATION_ACTIONS,
    REMEDIATION_DECISIONS,
    REMEDIATION_REFUSALS,
    REMEDIATION_ALERTS,
    REMEDIATION_WEBHOOK,
    REMEDIATION_ERRORS,
    REMEDIATION_RECHECKS,
    REMEDIATION_LEADER,
    REMEDIATION_HELD_AGE,
    REMEDIATION_MAX_HOLD,
    REMEDIATION_DISRUPTED,
)
"""Every family the remediation controller's Telemetry declares."""
