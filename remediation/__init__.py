"""xpuwatch remediation: Alertmanager webhook -> pure policy -> guard -> one action per kind, on Kubernetes."""
