"""Queue rule builder: kube-state-metrics (and Kueue/Volcano) series -> recording rules and the two queue alerts.

The field report's contradiction is "dashboards at 30-50 % while jobs queue". The device side is the
exporter's; the waiting side is read from what clusters already run:

* kube-state-metrics (the spec's ``kube_state_metrics_selector``): ``kube_pod_container_resource_requests{resource, unit}`` (the resource name with
  ``.``, ``/`` and ``-`` written as ``_``: ``nvidia.com/gpu`` -> ``nvidia_com_gpu``),
  ``kube_pod_status_phase{phase}``, ``kube_pod_status_scheduled{condition}`` and ``kube_pod_created`` (Unix
  seconds) — kube-state-metrics docs/metrics/workload/pod-metrics.md.
* Kueue: ``kueue_pending_workloads{cluster_queue, status="active|inadmissible"}`` (sigs.k8s.io/kueue
  pkg/metrics). Suspended Kueue jobs have no pods, so only this series sees them.
* Volcano: ``volcano_queue_pod_group_pending_count{queue_name}`` (volcano-sh/volcano docs/design/metrics.md).

A pod waits for an accelerator while it is ``Pending`` and not scheduled (the PodScheduled condition is
False: unschedulable, or held by a scheduling gate) and requests one of the vendors' accelerator resources
(``recording.queue_resources``, one regex per vendor label so the waiting side joins the device side on
``vendor``). Idle capacity of a vendor counts devices that are up and held by nobody plus devices held
whose P95 utilization is below ``recording.queue_idle_utilization``: both are cards a waiting job could
have had. Every aggregation keeps ``cluster`` so a fleet of clusters never mixes one cluster's queue with
another's idle cards (the label is simply empty inside one Prometheus). Pure: functions of the spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from xpuwatch.alerts.selectors import recorded, series
from xpuwatch.alerts.spec import AlertSpec, Spec
from xpuwatch.exporter import catalog as c

KSM_REQUESTS = "kube_pod_container_resource_requests"
KSM_PHASE = "kube_pod_status_phase"
KSM_SCHEDULED = "kube_pod_status_scheduled"
KSM_CREATED = "kube_pod_created"
KUEUE_PENDING = "kueue_pending_workloads"
VOLCANO_PENDING = "volcano_queue_pod_group_pending_count"

Body = tuple[str, str, str]


@dataclass(frozen=True)
class QueueRecords:
    """Names of the queue recording rules (``level:metric:operation``)."""

    pod_pending: str = "pod:kube_pod_accelerator_requests:pending"
    pending: str = "namespace_resource:kube_pod_accelerator_requests:pending"
    pending_age: str = "namespace_resource:kube_pod_accelerator_pending_age_seconds:max"
    idle: str = "vendor:accelerator_idle_devices:count"
    workloads_pending: str = "queue:accelerator_workloads_pending:sum"


QUEUE = QueueRecords()


def ksm_selector(spec: Spec) -> str:
    """Matchers of kube-state-metrics series: the spec's KSM job selector and cluster selector."""
    return ", ".join(p for p in (spec.kube_state_metrics_selector, spec.cluster_selector) if p)


def _resources(spec: Spec) -> Mapping[str, str]:
    resources: Mapping[str, str] = spec.rec("queue_resources")
    return resources


def _vendor_labelled(spec: Spec) -> str:
    """Accelerator requests of pods, each series given the ``vendor`` label of its resource."""
    resources = _resources(spec)
    every = "|".join(resources.values())
    expr = f'{KSM_REQUESTS}{{{ksm_selector(spec)}, resource=~"{every}"}}'
    for vendor, regex in resources.items():
        expr = f'label_replace(\n  {expr},\n  "vendor", "{vendor}", "resource", "{regex}"\n)'
    return expr


def pod_pending_expr(spec: Spec) -> str:
    """Accelerators requested by each waiting pod, by (cluster, namespace, pod, resource, vendor): the raw
    expression behind the ``pod_pending`` record, for readers that cannot rely on the rules (the report)."""
    ksm = ksm_selector(spec)
    waiting = (
        f'max by (cluster, namespace, pod) ({KSM_PHASE}{{{ksm}, phase="Pending"}}) == 1\n'
        f"and on (cluster, namespace, pod)\n"
        f'max by (cluster, namespace, pod) ({KSM_SCHEDULED}{{{ksm}, condition="false"}}) == 1'
    )
    return (
        f"sum by (cluster, namespace, pod, resource, vendor) (\n{_vendor_labelled(spec)}\n)\n"
        f"* on (cluster, namespace, pod) group_left ()\n(\n{waiting}\n)"
    )


def pending_age_expr(spec: Spec, pods: str | None = None) -> str:
    """Seconds since creation of the oldest waiting pod, by (cluster, namespace, resource, vendor); ``pods``
    is the waiting-pod expression (the record by default). Alerts evaluate it themselves rather than read
    the age record, so ``$value`` is the age at the alert's own evaluation."""
    pods = pods if pods is not None else recorded(spec, QUEUE.pod_pending)
    return (
        "max by (cluster, namespace, resource, vendor) (\n"
        f"  (time() - max by (cluster, namespace, pod) ({KSM_CREATED}{{{ksm_selector(spec)}}}))\n"
        f"  + on (cluster, namespace, pod) group_right ()\n  (0 * (({pods}) > 0))\n)"
    )


def recording_rules(spec: Spec, idle_p95: str) -> tuple[tuple[str, str], ...]:
    """(record, expr) pairs, in evaluation order. ``idle_p95`` is the device P95 utilization record."""
    idle_max = spec.rec("queue_idle_utilization")
    up, alloc = series(spec, c.UP), series(spec, c.ALLOCATED)
    return (
        (QUEUE.pod_pending, pod_pending_expr(spec)),
        (QUEUE.pending, f"sum by (cluster, namespace, resource, vendor) ({QUEUE.pod_pending} > 0)"),
        (QUEUE.pending_age, pending_age_expr(spec)),
        (
            QUEUE.idle,
            "count by (cluster, vendor) (\n"
            f"  group by (cluster, node, uuid, vendor) ({up} == 1 unless on (cluster, node, uuid) ({alloc} == 1))\n"
            "  or\n"
            f"  group by (cluster, node, uuid, vendor) ({idle_p95} < {idle_max} and on (cluster, node, uuid) ({alloc} == 1))\n"
            ")\n"
            f"or\n0 * count by (cluster, vendor) ({up})",
        ),
        (
            QUEUE.workloads_pending,
            f'sum by (cluster, queue, scheduler) (label_replace(label_replace({KUEUE_PENDING}, "queue", "$1", "cluster_queue", "(.*)"), "scheduler", "kueue", "", ""))\n'
            f'or\nsum by (cluster, queue, scheduler) (label_replace(label_replace({VOLCANO_PENDING}, "queue", "$1", "queue_name", "(.*)"), "scheduler", "volcano", "", ""))',
        ),
    )


_WAIT = "{{ $labels.namespace }} waits for {{ $labels.resource }}"


def jobs_queued_while_idle(a: AlertSpec, spec: Spec) -> Body:
    t = a.value("pending_seconds")
    return (
        f"{pending_age_expr(spec)} > {t}\nand on (cluster, vendor)\n{recorded(spec, QUEUE.idle)} > 0",
        "Jobs queue for {{ $labels.resource }} while {{ $labels.vendor }} cards idle",
        f"{_WAIT} (oldest pod pending {{{{ $value | humanizeDuration }}}}, threshold {t:.0f}s) while "
        "{{ $labels.vendor }} devices in this cluster are free or held idle: check the pod's node selector, "
        "tolerations and resource template against the idle cards, and reclaim idle holders.",
    )


def queue_time_high(a: AlertSpec, spec: Spec) -> Body:
    t = a.value("pending_seconds")
    return (
        f"{pending_age_expr(spec)} > {t}\nunless on (cluster, vendor)\n{recorded(spec, QUEUE.idle)} > 0",
        "Jobs queue for {{ $labels.resource }}: {{ $labels.vendor }} pool saturated",
        f"{_WAIT} (oldest pod pending {{{{ $value | humanizeDuration }}}}, threshold {t:.0f}s) and no "
        "{{ $labels.vendor }} device in this cluster is free or idle: a capacity signal (add cards, share "
        "them, or preempt with checkpoints).",
    )
