"""Series the dashboards read: catalog metrics, recording rules, and names owned by other packages.

Metric names come from ``exporter.catalog`` (imported, never retyped); recording-rule names from
``alerts.rules.records`` applied to the alert spec (the same call that generates alerts/generated/rules.yml),
and thresholds shown on panels from the same spec, so a panel's band moves when the spec's alert does.
The relay's and the remediation controller's own metrics come from the catalog too (``c.RELAY_*``,
``c.REMEDIATION_*``), where those services take them from.
"""

from __future__ import annotations

from xpuwatch.alerts.rules import Records, records
from xpuwatch.alerts.spec import Spec, load_spec
from xpuwatch.exporter import catalog as c

SPEC: Spec = load_spec()
RECORDS: Records = records(SPEC)

# Prometheus' own series: one per active alert (alertstate pending|firing) with the alert's labels, and the
# scrape health of every target.
ALERTS = "ALERTS"
UP_TARGET = "up"


# Matchers each dashboard applies (Grafana multi-value variables with allValue ".*", which also matches a
# missing label: single-cluster installs need no `cluster` label).
FLEET = ("cluster", "node", "vendor", "model")
CLUSTER = ("cluster",)
# Joins and aggregations carry the cluster label (node names and namespaces repeat across clusters); the
# recording rules keep it too (alerts/rules.py aggregates `by (cluster, ...)`).
ON_DEVICE = "on (cluster, node, uuid)"


def selector(metric: str | c.ServiceMetric, variables: tuple[str, ...] = FLEET, extra: str = "") -> str:
    """``metric{var=~"$var", ..., extra}``: the series filtered by the dashboard variables.

    >>> selector("m", ("node",), 'type="x"')
    'm{node=~"$node", type="x"}'
    """
    name = metric.name if isinstance(metric, c.ServiceMetric) else metric
    matchers = [f'{v}=~"${v}"' for v in variables]
    if extra:
        matchers.append(extra)
    return f"{name}{{{', '.join(matchers)}}}" if matchers else name


def any_of(*metrics: str) -> str:
    """A ``__name__`` regex matching exactly these catalog names (for panels showing several readings)."""
    known = c.by_name()
    for m in metrics:
        if m not in known:
            raise KeyError(f"{m!r} is not in the metric catalog")
    return "|".join(metrics)


# Device tables list at most this many rows, worst first: at 16,384 devices a condition can hold for
# thousands of devices, more than anyone reads in a table and more than the browser renders quickly; the
# alerts still name every device, and the stat panels beside the tables count them all.
TABLE_ROWS = 50


def worst(expr: str, first: str = "topk") -> str:
    """``expr`` limited to the ``TABLE_ROWS`` series of highest (``topk``) or lowest (``bottomk``) value.

    >>> worst("m == 0")
    'topk(50, m == 0)'
    """
    return f"{first}({TABLE_ROWS}, {expr})"


# Per-node time series on the fleet boards draw the nodes with the highest values only: at 16,384 devices
# (2,048 nodes) "one line per node" was 3,072 series of 1,081 points for Temperature (678 ms in
# VictoriaMetrics, mostly answer size) and no one reads 3,000 lines; topk keeps each step's top nodes.
TOP_NODES = 10


def top_nodes(expr: str, by: str = "") -> str:
    """``expr`` limited to the ``TOP_NODES`` highest series at each step (per ``by`` labels if given).

    >>> top_nodes("m", "sensor")
    'topk by (sensor) (10, m)'
    """
    return f"topk by ({by}) ({TOP_NODES}, {expr})" if by else f"topk({TOP_NODES}, {expr})"


DEVICE_ID = "cluster, node, vendor, model, device, uuid"
SLICE_ID = "cluster, node, vendor, model, device, uuid, slice_id, profile, slice_kind"
POOL = "cluster, vendor, model"
# Variables that apply to series pre-aggregated per node (recording rules `node:...`): vendor and model are
# aggregated away there.
NODE_VARS = ("cluster", "node")
