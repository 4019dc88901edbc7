"""xpuwatch exporter."""
