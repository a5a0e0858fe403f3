"""Recorded command outputs for the diagnose links, with where each comes from.

Real (quoted from public bug reports, byte for byte where the source gives the full line):
- DEVICE_PLUGIN_NO_NVML: NVIDIA/k8s-device-plugin issue #182 (2020-10-14), `kubectl logs` of the daemonset pod.
- SCHED_TAINT_AND_GPU: NVIDIA/k8s-device-plugin issue #36, PodScheduled condition message.
Real, read in place from ../shared/data: `nvidia-smi -L` (nvidia-smi/mig/), Fabric state (nvidia-smi/query/).
Carefully recorded (the tools' fixed message formats, with this project's names filled in; labelled so):
the scheduler's current wording ("untolerated taint", "Insufficient nvidia.com/gpu", the preemption tail),
the ResourceQuota admission message, /proc/driver/nvidia/version lines of the proprietary and open modules,
`containerd config dump` excerpts as nvidia-ctk writes them, `docker info` runtimes, `nvidia-ctk` output.
"""

DEVICE_PLUGIN_NO_NVML = """2020/10/14 18:04:53 Loading NVML
2020/10/14 18:04:53 Failed to initialize NVML: could not load NVML library.
2020/10/14 18:04:53 If this is a GPU node, did you set the docker default runtime to `nvidia`?
2020/10/14 18:04:53 You can check the prerequisites at: https://github.com/NVIDIA/k8s-device-plugin#prerequisites
2020/10/14 18:04:53 You can learn how to set the runtime at: https://github.com/NVIDIA/k8s-device-plugin#quick-start
"""
DEVICE_PLUGIN_HEALTHY = (
    "I0121 12:04:24.666347       1 server.go:165] Starting GRPC server for 'nvidia.com/gpu'\n"
    "I0121 12:04:24.667032       1 server.go:117] Starting to serve 'nvidia.com/gpu' on "
    "/var/lib/kubelet/device-plugins/nvidia-gpu.sock\n"
    "I0121 12:04:24.669734       1 server.go:125] Registered device plugin for 'nvidia.com/gpu' with Kubelet\n"
)
SCHED_TAINT_AND_GPU = "0/2 nodes are available: 1 PodToleratesNodeTaints, 2 Insufficient nvidia.com/gpu."
SCHED_UNTOLERATED = ("0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: present}. "
                     "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
SCHED_INSUFFICIENT = ("0/2 nodes are available: 1 node(s) had untolerated taint "
                      "{node-role.kubernetes.io/control-plane: }, 1 Insufficient nvidia.com/gpu. preemption: 0/2 nodes "
                      "are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for "
                      "scheduling.")
QUOTA_FAILED_CREATE = ('Error creating: pods "train-vision-7xk2p" is forbidden: exceeded quota: team-vision, '
                       "requested: requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=8, "
                       "limited: requests.nvidia.com/gpu=8")

PROC_VERSION_PROPRIETARY = """NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jun 25 09:29:56 UTC 2025
GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)
"""
PROC_VERSION_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
    "(dvs-builder@U16-I3-B08-1-1)  Thu Oct 10 12:02:41 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
# dpkg-query -W -f '${Package} ${Version}\n' '*nvidia*' on the driver scenario's node (Debian 12, 535 from non-free)
DPKG_535_261 = """firmware-nvidia-gsp 535.261.03-1
libnvidia-ml1 535.261.03-1
nvidia-driver 535.261.03-1
nvidia-kernel-dkms 535.261.03-1
nvidia-smi 535.261.03-1
"""
DPKG_535_309 = DPKG_535_261.replace("535.261.03", "535.309.01")
DPKG_CUDA_REPO_565 = """cuda-drivers-565 565.57.01-1
nvidia-driver-565-open 565.57.01-0ubuntu1
nvidia-fabricmanager-565 565.57.01-1
"""

# `rpm -qa --qf '%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\n' '*nvidia*' 'cuda-drivers*'` on RHEL 9 with what
# the nvidia_driver role installs from NVIDIA's CUDA repository (roles/nvidia_driver/vars/RedHat.yml, module stream
# nvidia-driver:550-dkms) and their dependencies; NVIDIA's driver RPMs carry epoch 3, the toolkit's and Fabric
# Manager's none (EPOCHNUM prints 0). rpm lists in database order, not sorted.
RPM_RHEL9_550 = """nvidia-kmod-common 3:550.90.07-1.el9
kmod-nvidia-latest-dkms 3:550.90.07-1.el9
nvidia-driver-cuda-libs 3:550.90.07-1.el9
nvidia-driver-libs 3:550.90.07-1.el9
nvidia-persistenced 3:550.90.07-1.el9
nvidia-driver-cuda 3:550.90.07-1.el9
nvidia-modprobe 3:550.90.07-1.el9
nvidia-fabric-manager 0:550.90.07-1
libnvidia-container1 0:1.17.8-1
nvidia-container-toolkit-base 0:1.17.8-1
"""
RPM_RHEL9_TOOLKIT_ONLY = """libnvidia-container1 0:1.17.8-1
nvidia-container-toolkit-base 0:1.17.8-1
nvidia-container-toolkit 0:1.17.8-1
"""
# `rpm -qa --qf '%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n' 'nvidia-fabric*manager*'` on the same host.
RPM_RHEL9_FM_550 = "0:550.90.07-1\n"

CONTAINERD_V2_NVIDIA = """version = 2
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
"""
CONTAINERD_V3_NVIDIA = """version = 3
[plugins]
  [plugins."io.containerd.cri.v1.runtime"]
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "nvidia"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
          BinaryName = "/usr/bin/nvidia-container-runtime"
"""
CONTAINERD_NO_NVIDIA = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
"""
CONTAINERD_NVIDIA_NO_BINARY = CONTAINERD_V2_NVIDIA.replace(
    'BinaryName = "/usr/bin/nvidia-container-runtime"', 'BinaryName = "/usr/bin/runc"')

DOCKER_RUNTIMES_NVIDIA = ('{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"},'
                          '"runc":{"path":"runc"}}')
DOCKER_RUNTIMES_PLAIN = '{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"}}'
DAEMON_JSON_PLAIN = '{"log-driver": "json-file", "log-opts": {"max-size": "10m", "max-file": "3"}}'

NVIDIA_SMI_NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
                        "the latest NVIDIA driver is installed and running.\n")
NVIDIA_SMI_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.309\n"
NVIDIA_SMI_NO_DEVICES = "No devices were found\n"

CTK_VERSION = "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d\n"
CDI_LIST_2 = """INFO[0000] Found 3 CDI devices
nvidia.com/gpu=0
nvidia.com/gpu=1
nvidia.com/gpu=all
"""
