"""daemon.json contents and a dockerd answer shared by the module_utils/docker_daemon tests and the
docker_daemon_config module tests, with where each comes from."""

from __future__ import annotations

# What `nvidia-ctk runtime configure --runtime=docker` leaves in daemon.json (NVIDIA Container
# Toolkit docs), plus an admin's own key: both must survive our merge.
NVIDIA_CTK_DAEMON_JSON = """{
    "default-runtime": "nvidia",
    "runtimes": {
        "nvidia": {
            "args": [],
            "path": "nvidia-container-runtime"
        }
    },
    "registry-mirrors": ["https://mirror.example"]
}
"""
OURS = {"log-driver": "json-file", "log-opts": {"max-size": "50m", "max-file": "5"}, "live-restore": True}
# What nvidia_container_toolkit merges (its defaults).
NVIDIA = {
    "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}},
    "default-runtime": "nvidia",
    "default-shm-size": "1G",
    "default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1},
                        "stack": {"Name": "stack", "Soft": 67108864, "Hard": 67108864}},
}
# An interrupted editor's daemon.json (the driver scenario's negative case) and one that is not even UTF-8.
TRUNCATED = b'{"log-driver": "json-file", "log-opts": {"max-size": "10m"'
NOT_UTF8 = b'{"log-driver": "json-file"}\xff\xfe\x00garbage'
# `dockerd --validate --config-file x` from Debian 12's docker.io 20.10.24 (exit code 1).
DOCKERD_20_10_ANSWER = "Status: unknown flag: --validate\nSee 'dockerd --help'., Code: 125\n"
