"""How every rule reads a series: the spec's job and cluster selectors around a metric or a recorded name.

The lowest module of the rule builders: ``rules`` (alerting and recording rules) and ``queue`` (the
pending-pod records and alerts) both build their selectors here, so neither imports the other's helpers.
"""

from __future__ import annotations

from xpuwatch.alerts.spec import Spec


def matchers(*parts: str) -> str:
    """The non-empty ``parts`` joined as one matcher list (``a="1", b=~"2"``)."""
    return ", ".join(p for p in parts if p)


def series(spec: Spec, metric: str, extra: str = "") -> str:
    """``metric{<job selector>, <cluster selector>, extra}``: an exporter series as every rule reads it, e.g.
    ``accelerator_up{job=~"xpuwatch|xpuwatch-exporter"}`` with the default (empty) cluster selector."""
    return f"{metric}{{{matchers(spec.exporter_job_selector, spec.cluster_selector, extra)}}}"


def recorded(spec: Spec, name: str, extra: str = "") -> str:
    """A recorded series (already filtered by job when recorded), narrowed by the cluster selector."""
    m = matchers(spec.cluster_selector, extra)
    return f"{name}{{{m}}}" if m else name


def team_of(allocated: str) -> str:
    """``accelerator_allocated`` series (``allocated``, a selector or expression) with a Slurm job's partition
    as their ``namespace``: the team columns of the chargeback records and the report read namespace and
    owner, and a Slurm holder has no namespace (exporter.jobmap: ``job_partition``; its ``owner`` is already
    the job's user). Pod holders have no ``job_partition`` and pass unchanged."""
    return f'label_replace({allocated}, "namespace", "$1", "job_partition", "(.+)")'
