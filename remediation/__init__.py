"""xpuwatch remediation."""
