"""gpuops-run: the CI and operator entry point of gpuops.cluster, on ansible-runner."""
