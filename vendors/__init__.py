"""xpuwatch vendors."""
