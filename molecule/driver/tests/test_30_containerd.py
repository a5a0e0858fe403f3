"""nvidia_container_toolkit on containerd 1.7 (Debian 13): drop-in runtime, config.toml merged, not clobbered."""

from __future__ import annotations

import re

testinfra_hosts = ["gpuops-driver-deb13"]

RUNTIME = "/usr/bin/nvidia-container-runtime"


def test_containerd_has_the_nvidia_runtime_from_the_drop_in(host):
    dump = host.check_output("containerd config dump")
    assert '"/etc/containerd/conf.d/99-nvidia.toml"' in dump.splitlines()[1]
    section = dump[dump.index('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]'):]
    assert f'BinaryName = "{RUNTIME}"' in section.split("\n\n")[0]
    assert re.search(r'^\s*default_runtime_name = "nvidia"$', dump, re.M)


def test_containerd_kept_the_settings_config_toml_already_had(host):
    dump = host.check_output("containerd config dump")
    # containerd 1.x would reset these to its defaults if the drop-in carried only the nvidia runtime.
    assert 'sandbox_image = "registry.gpuops.invalid/pause:3.9-gpuops-test"' in dump
    runc = dump[dump.index('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]'):]
    assert "SystemdCgroup = true" in runc.split("\n\n")[0]
    main = host.file("/etc/containerd/config.toml").content_string
    assert re.search(r'^imports = \[.*"/etc/containerd/conf\.d/\*\.toml".*\]$', main, re.M)
    assert "written by the test scenario" in main
    files = host.check_output("ls /etc/containerd").split()
    assert [f for f in files if f.startswith("config.toml.") and f.endswith("~")], files
