"""xpuwatch: observability and self-healing for mixed-vendor GPU/NPU clusters.

The one installed top-level name. Its rooms are the repository's top-level folders, linked in here so that a
source checkout, an editable install and the wheel all import them as ``xpuwatch.<room>`` (the wheel holds
real copies; see the README's "Layout"):

    xpuwatch.vendors      device model, backend contract, one module per vendor, simulator
    xpuwatch.exporter     the per-node exporter and what every service shares (settings, listener, logs)
    xpuwatch.alerts       alert spec, rule and Alertmanager builders, the chat relay (alerts.relay)
    xpuwatch.dashboards   Grafana dashboards
    xpuwatch.report       the baseline report
    xpuwatch.remediation  the remediation controller
    xpuwatch.deploy       the local demo and deployment helpers
"""
