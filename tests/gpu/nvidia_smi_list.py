"""The reader of ``nvidia-smi -L`` that the GPU-host tests count GPUs with (``live.LISTED``).

Kept with the tests, not in module_utils: no module runs ``nvidia-smi -L`` (gpu_facts reads ``-q -x``), and the
tests want a GPU list that comes from another output than the one under test. Checked on the real captures in
../shared/data/nvidia-smi/{mig,h200-driver580} by tests/unit/plugins/module_utils/test_gpu_facts_smi.py.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import GpuFactsParseError
from ansible_collections.gpuops.cluster.plugins.module_utils.text import strip_terminal

_L_GPU_RE = re.compile(r"^GPU\s+(?P<index>\d+):\s+(?P<name>.+?)\s+\(UUID:\s*(?P<uuid>[^)]+)\)\s*$")
_L_MIG_RE = re.compile(r"^\s+MIG\s+(?P<profile>\S+)\s+Device\s+(?P<index>\d+):\s+\(UUID:\s*(?P<uuid>[^)]+)\)\s*$")


def parse_nvidia_smi_list(text: str) -> list:
    """Parse ``nvidia-smi -L``: ``[{index, name, uuid, mig_devices: [{index, profile, uuid}]}]``."""
    gpus: list = []
    for line in strip_terminal(text).splitlines():
        if not line.strip() or line.strip() == "No devices found.":
            continue
        gpu = _L_GPU_RE.match(line)
        mig = _L_MIG_RE.match(line)
        if gpu:
            gpus.append(
                {
                    "index": int(gpu.group("index")),
                    "name": gpu.group("name"),
                    "uuid": gpu.group("uuid").strip(),
                    "mig_devices": [],
                }
            )
        elif mig and gpus:
            gpus[-1]["mig_devices"].append(
                {"index": int(mig.group("index")), "profile": mig.group("profile"), "uuid": mig.group("uuid").strip()}
            )
        else:
            raise GpuFactsParseError("nvidia-smi -L output", f"unrecognised line {line.strip()!r}", text)
    return gpus
