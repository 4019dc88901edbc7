"""xpuwatch alerts."""
