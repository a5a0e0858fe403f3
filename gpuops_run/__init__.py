"""gpuops-run: the CI and operator entry point of gpuops.cluster, on ansible-runner."""

__version__ = "0.1.0"
