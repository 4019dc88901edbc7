"""Baseline report: a week of fleet history in Prometheus -> one self-contained HTML page for a manager."""
