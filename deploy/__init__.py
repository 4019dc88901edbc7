"""xpuwatch deploy."""
