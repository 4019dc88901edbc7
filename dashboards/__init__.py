"""xpuwatch dashboards."""
