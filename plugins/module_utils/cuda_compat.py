# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""CUDA toolkit <-> NVIDIA driver compatibility: the table and the decision.

Pure functions, no Ansible imports. ``check_compat()`` answers; it raises ValueError only for
malformed input or a CUDA release the table does not know. "Incompatible" is an answer, not an error.

Sources (facts copied, in this project's own structure):
- Native minimum drivers: NVIDIA CUDA Toolkit 13.2 Update 2 release notes, Table 3 "CUDA Toolkit and
  Corresponding Driver Versions", Linux x86_64 column
  (https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/index.html).
- Minor-version floors: NVIDIA CUDA Compatibility guide, minor-version compatibility table
  (https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html; exact floors from the
  guide's earlier revision: 12.x >= 525.60.13, 11.x >= 450.80.02; 13.x is published only as >= 580).
- Forward compatibility (cuda-compat package): same guide, "Forward Compatibility"
  (https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html): data-center GPUs,
  select NGC Server Ready RTX SKUs and Jetson only.
- Supported data-center driver branches: NVIDIA "Supported Drivers and CUDA Toolkit Versions"
  (https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions.html), Table 2.
- Fabric Manager must match the driver's full version: NVIDIA Fabric Manager User Guide, and the real
  nv-fabricmanager error "fabric manager NVIDIA GPU driver interface version 530.30.02 don't match with
  driver version 530.41.03" (NVIDIA/gpu-operator issue #544).
The same facts, with quotes, are collected in ../shared/data/cuda/ and ../shared/data/rules.md, which the
unit tests read to check this table row by row.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from ansible_collections.gpuops.cluster.plugins.module_utils.versions import (
    Version,
    format_version,
    parse_cuda_version,
    parse_driver_version,
    version_eq,
    version_ge,
)

MAJOR_MINOR = 2  # length of a (major, minor) version tuple
CUDA_DROPPED_PRE_TURING = 13  # CUDA 13.0 removed Maxwell/Pascal/Volta support


class CudaRelease(NamedTuple):
    label: str  # as NVIDIA's release notes name the release
    version: Version  # (major, minor, update); (major, minor) for 10.x, whose third number is a build number
    min_driver: str  # minimum Linux x86_64 driver for native support, as printed by NVIDIA
    ga: bool  # the general-availability release of its major.minor (what a bare "12.4" means)


# CUDA 10.0 .. 13.2 Update 2, newest first. Source: CUDA 13.2 Update 2 release notes, Table 3 (see module doc).
CUDA_RELEASES: tuple[CudaRelease, ...] = (
    CudaRelease("13.2 Update 2", (13, 2, 2), "595.71.05", False),
    CudaRelease("13.2 Update 1", (13, 2, 1), "595.58.03", False),
    CudaRelease("13.2 GA", (13, 2, 0), "595.45.04", True),
    CudaRelease("13.1 Update 1", (13, 1, 1), "590.48.01", False),
    CudaRelease("13.1 GA", (13, 1, 0), "590.44.01", True),
    CudaRelease("13.0 Update 2", (13, 0, 2), "580.95.05", False),
    CudaRelease("13.0 Update 1", (13, 0, 1), "580.82.07", False),
    CudaRelease("13.0 GA", (13, 0, 0), "580.65.06", True),
    CudaRelease("12.9 Update 1", (12, 9, 1), "575.57.08", False),
    CudaRelease("12.9 GA", (12, 9, 0), "575.51.03", True),
    CudaRelease("12.8 Update 1", (12, 8, 1), "570.124.06", False),
    CudaRelease("12.8 GA", (12, 8, 0), "570.26", True),
    CudaRelease("12.6 Update 3", (12, 6, 3), "560.35.05", False),
    CudaRelease("12.6 Update 2", (12, 6, 2), "560.35.03", False),
    CudaRelease("12.6 Update 1", (12, 6, 1), "560.35.03", False),
    CudaRelease("12.6 GA", (12, 6, 0), "560.28.03", True),
    CudaRelease("12.5 Update 1", (12, 5, 1), "555.42.06", False),
    CudaRelease("12.5 GA", (12, 5, 0), "555.42.02", True),
    CudaRelease("12.4 Update 1", (12, 4, 1), "550.54.15", False),
    CudaRelease("12.4 GA", (12, 4, 0), "550.54.14", True),
    CudaRelease("12.3 Update 1", (12, 3, 1), "545.23.08", False),
    CudaRelease("12.3 GA", (12, 3, 0), "545.23.06", True),
    CudaRelease("12.2 Update 2", (12, 2, 2), "535.104.05", False),
    CudaRelease("12.2 Update 1", (12, 2, 1), "535.86.09", False),
    CudaRelease("12.2 GA", (12, 2, 0), "535.54.03", True),
    CudaRelease("12.1 Update 1", (12, 1, 1), "530.30.02", False),
    CudaRelease("12.1 GA", (12, 1, 0), "530.30.02", True),
    CudaRelease("12.0 Update 1", (12, 0, 1), "525.85.12", False),
    CudaRelease("12.0 GA", (12, 0, 0), "525.60.13", True),
    CudaRelease("11.8 GA", (11, 8, 0), "520.61.05", True),
    CudaRelease("11.7 Update 1", (11, 7, 1), "515.48.07", False),
    CudaRelease("11.7 GA", (11, 7, 0), "515.43.04", True),
    CudaRelease("11.6 Update 2", (11, 6, 2), "510.47.03", False),
    CudaRelease("11.6 Update 1", (11, 6, 1), "510.47.03", False),
    CudaRelease("11.6 GA", (11, 6, 0), "510.39.01", True),
    CudaRelease("11.5 Update 2", (11, 5, 2), "495.29.05", False),
    CudaRelease("11.5 Update 1", (11, 5, 1), "495.29.05", False),
    CudaRelease("11.5 GA", (11, 5, 0), "495.29.05", True),
    CudaRelease("11.4 Update 4", (11, 4, 4), "470.82.01", False),
    CudaRelease("11.4 Update 3", (11, 4, 3), "470.82.01", False),
    CudaRelease("11.4 Update 2", (11, 4, 2), "470.57.02", False),
    CudaRelease("11.4 Update 1", (11, 4, 1), "470.57.02", False),
    CudaRelease("11.4.0 GA", (11, 4, 0), "470.42.01", True),
    CudaRelease("11.3.1 Update 1", (11, 3, 1), "465.19.01", False),
    CudaRelease("11.3.0 GA", (11, 3, 0), "465.19.01", True),
    CudaRelease("11.2.2 Update 2", (11, 2, 2), "460.32.03", False),
    CudaRelease("11.2.1 Update 1", (11, 2, 1), "460.32.03", False),
    CudaRelease("11.2.0 GA", (11, 2, 0), "460.27.03", True),
    CudaRelease("11.1.1 Update 1", (11, 1, 1), "455.32", False),
    CudaRelease("11.1 GA", (11, 1, 0), "455.23", True),
    CudaRelease("11.0.3 Update 1", (11, 0, 3), "450.51.06", False),
    CudaRelease("11.0.2 GA", (11, 0, 2), "450.51.05", True),
    CudaRelease("11.0.1 RC", (11, 0, 1), "450.36.06", False),
    CudaRelease("10.2.89", (10, 2), "440.33", True),
    CudaRelease("10.1 (10.1.105 general release, and updates)", (10, 1), "418.39", True),
    CudaRelease("10.0.130", (10, 0), "410.48", True),
)

# Minor-version compatibility (CUDA 11 onwards): within a CUDA major, a driver at or above the floor runs
# applications built with any toolkit of that major, with a limited feature set. CUDA 10.x has none.
MINOR_VERSION_FLOORS: dict[int, str] = {
    11: "450.80.02",
    12: "525.60.13",
    13: "580",
}


# Data-center driver branches NVIDIA still supports (Table 2 of the "Supported Drivers and CUDA Toolkit
# Versions" page). "All other previous driver branches [...] are end of life" -- no forward compatibility there.
SUPPORTED_DATACENTER_BRANCHES: dict[int, str] = {  # branch -> its designation and end of life
    535: "Long Term Support Branch, end of life June 2026",
    570: "Production Branch, end of life February 2026",
    580: "Long Term Support Branch, end of life August 2028",
}

# GPU names as nvidia-smi prints them, less an "NVIDIA " or "Tesla " prefix; first word (split at space or -).
DATACENTER_MODELS = frozenset(
    (
        # Volta .. Blackwell data-center parts
        "V100", "V100S", "T4", "A2", "A10", "A10G", "A16", "A30", "A40", "A100", "A800",
        "H20", "H100", "H200", "H800", "GH200", "L2", "L4", "L20", "L40", "L40S",
        "B100", "B200", "B300", "GB200", "GB300",
        # older Tesla parts (usually printed with the "Tesla" prefix anyway)
        "P4", "P6", "P40", "P100", "K10", "K20", "K20X", "K40", "K80", "M4", "M6", "M10", "M40", "M60",
    )
)  # fmt: skip
_NOT_DATACENTER = re.compile(r"\b(GEFORCE|TITAN|QUADRO|RTX|GTX)\b")
_JETSON = re.compile(r"\b(JETSON|ORIN|XAVIER)\b")
# Maxwell, Pascal and Volta: CUDA 13.0 removed offline compilation and library support for them.
_PRE_TURING = re.compile(
    r"\b(V100S?|GV100|P4|P6|P40|P100|GP100|M4|M6|M10|M40|M60|TITAN V|TITAN XP?|GTX (?:9\d\d|10\d0)"
    r"|QUADRO (?:P|M)\d+)\b"
)


def _minor_label(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def find_release(cuda: Version) -> CudaRelease:
    """The table row for a parsed CUDA version (a bare major.minor is its GA release, as the module's doc says; for
    10.x the third number is a build number and is ignored); ValueError for a release the table does not know."""
    same_minor = [r for r in CUDA_RELEASES if r.version[:2] == cuda[:2]]
    if not same_minor:
        newest, oldest = CUDA_RELEASES[0], CUDA_RELEASES[-1]
        if cuda[:2] > newest.version[:2]:
            raise ValueError(
                f"cuda_version '{format_version(cuda)}' is newer than the compatibility table, which ends at CUDA "
                f"{newest.label}; add its row (from NVIDIA's CUDA release notes, Table 3) to CUDA_RELEASES in "
                "plugins/module_utils/cuda_compat.py"
            )
        if cuda[:2] < oldest.version[:2]:
            raise ValueError(
                f"cuda_version '{format_version(cuda)}' is older than CUDA 10.0, where the table starts; "
                "use CUDA 10.0 or newer"
            )
        known = sorted({_minor_label(r.version) for r in CUDA_RELEASES if r.version[0] == cuda[0]})
        raise ValueError(
            f"cuda_version '{format_version(cuda)}': there is no CUDA {_minor_label(cuda)} release; "
            f"known CUDA {cuda[0]} releases are {', '.join(known)}"
        )
    if len(same_minor[0].version) == MAJOR_MINOR:  # 10.x: one driver requirement per minor
        return same_minor[0]
    if len(cuda) == MAJOR_MINOR:
        return next(r for r in same_minor if r.ga)
    for release in same_minor:
        if release.version == cuda:
            return release
    known = ", ".join(f"{format_version(r.version)} ({r.label})" for r in reversed(same_minor))
    raise ValueError(
        f"cuda_version '{format_version(cuda)}' is not a CUDA {_minor_label(cuda)} release in the table; "
        f"known releases: {known}"
    )


def later_updates(release: CudaRelease, driver: Version) -> list[CudaRelease]:
    """Updates of the same major.minor, after ``release``, whose native minimum ``driver`` does not meet."""
    return [
        r
        for r in reversed(CUDA_RELEASES)
        if r.version[:2] == release.version[:2] and r.version > release.version and not version_ge(driver, r.min_driver)
    ]


def max_native_cuda(driver: Version) -> str | None:
    """The module's ``max_cuda``: newest CUDA toolkit major.minor whose GA release this driver runs natively."""
    supported = [r.version[:2] for r in CUDA_RELEASES if version_ge(driver, r.min_driver)]
    if not supported:
        return None
    return _minor_label(max(supported))


def classify_gpu(gpu_name: str | None) -> tuple[bool | None, str]:
    """Whether a GPU may use forward compatibility: (True/False, why), or (None, why) when no name is given."""
    if gpu_name is None or not gpu_name.strip():
        return None, "gpu_name was not given"
    name = " ".join(gpu_name.upper().split())
    if name.startswith("TESLA "):
        return True, f"'{gpu_name}' is a Tesla (data-center) GPU"
    bare = name[len("NVIDIA ") :] if name.startswith("NVIDIA ") else name
    if _JETSON.search(bare):
        return True, f"'{gpu_name}' is a Jetson board"
    if "SERVER EDITION" in bare:
        return True, f"'{gpu_name}' is a server-edition (data-center) GPU"
    if _NOT_DATACENTER.search(bare):
        return False, (
            f"'{gpu_name}' is a GeForce/TITAN/Quadro/RTX card, not a data-center GPU (RTX cards qualify only as "
            "select NGC Server Ready SKUs, which the name does not show)"
        )
    model = re.split(r"[\s-]", bare, maxsplit=1)[0]
    if model in DATACENTER_MODELS:
        return True, f"'{gpu_name}' is a data-center GPU ({model})"
    return False, f"'{gpu_name}' is not a known data-center GPU model"


def _fabric_manager(driver_text: str, driver: Version, fm_text: str | None) -> tuple[bool | None, list[str]]:
    if fm_text is None:
        return None, []
    fabric = parse_driver_version(fm_text, name="fabric_manager_version")
    if version_eq(fabric, driver):
        return True, [f"fabric manager {fm_text.strip()} matches driver {driver_text} exactly"]
    return False, [
        f"fabric manager {fm_text.strip()} does not match driver {driver_text}: nv-fabricmanager compares the full "
        "version and refuses to start ('fabric manager NVIDIA GPU driver interface version ... don't match with "
        "driver version ...'), leaving NVSwitch systems with cudaErrorSystemNotReady (802); install "
        f"nvidia-fabricmanager {driver_text} (same full version as the driver) and hold both packages"
    ]


def _forward_compat(driver_text: str, driver: Version, cuda: Version, gpu_name: str | None) -> tuple[bool, list[str]]:
    """Whether the cuda-compat package path exists, and why: (possible, reasons)."""
    datacenter, why = classify_gpu(gpu_name)
    package = f"cuda-compat-{cuda[0]}-{cuda[1]}"
    branch = SUPPORTED_DATACENTER_BRANCHES.get(driver[0])
    if datacenter is None:
        refusal = (
            f"gpu_name was not given, so forward compatibility ({package}, data-center GPUs only) cannot be "
            "established; pass gpu_name (nvidia-smi --query-gpu=name) to consider it"
        )
    elif not datacenter:
        refusal = (
            f"{why}: forward compatibility ({package}) applies only to NVIDIA data-center GPUs, select NGC Server "
            "Ready RTX SKUs and Jetson boards; elsewhere CUDA fails with cudaErrorCompatNotSupportedOnDevice (804)"
        )
    elif branch is None:
        names = ", ".join(f"R{number}" for number in SUPPORTED_DATACENTER_BRANCHES)
        refusal = (
            f"{why}, but driver branch R{driver[0]} ({driver_text}) is end of life: forward compatibility "
            f"({package}) needs a supported data-center driver branch ({names})"
        )
    else:
        return True, [
            f"{why} on driver branch R{driver[0]} ({branch}): "
            f"CUDA {format_version(cuda)} runs through forward compatibility with the {package} package",
            f"constraints: {package} must be installed (in the container image, or on the host with its compat "
            "directory on the library path) and match the toolkit's minor; the kernel driver stays "
            f"{driver_text}; a mismatch fails with cudaErrorSystemDriverMismatch (803), and features that need a "
            "newer kernel-mode driver stay unavailable",
        ]
    return False, [refusal]


def check_compat(
    driver_version: str,
    cuda_version: str,
    gpu_name: str | None = None,
    fabric_manager_version: str | None = None,
) -> dict[str, Any]:
    """How (and whether) CUDA ``cuda_version`` runs on driver ``driver_version``: the cuda_compat module's return
    values (its RETURN)."""
    driver = parse_driver_version(driver_version)
    cuda = parse_cuda_version(cuda_version)
    driver_text = driver_version.strip()
    release = find_release(cuda)
    max_cuda = max_native_cuda(driver)
    reasons: list[str] = []
    datacenter, _why = classify_gpu(gpu_name)
    floor = MINOR_VERSION_FLOORS.get(cuda[0])
    wanted = f"CUDA {release.label}"

    if version_ge(driver, release.min_driver):
        mode = "native"
        reasons.append(f"driver {driver_text} >= {release.min_driver}, the minimum for {wanted}: native support")
    elif floor is not None and version_ge(driver, floor):
        mode = "minor_version"
        reasons.append(
            f"driver {driver_text} is below {release.min_driver}, the native minimum for {wanted}, but at or above "
            f"{floor}, the CUDA {cuda[0]}.x minor-version compatibility floor: it runs with a limited feature set"
        )
        reasons.append(
            "minor-version compatibility caveats: no PTX JIT (ship SASS/cubins for the GPU architecture, not PTX "
            "only); APIs that need a newer driver return cudaErrorCallRequiresNewerDriver; "
            f"upgrade the driver to >= {release.min_driver} for native support"
        )
        if datacenter:
            reasons.append(
                f"on this data-center GPU the cuda-compat-{cuda[0]}-{cuda[1]} package (forward compatibility) would "
                "lift those limits without changing the kernel driver"
            )
    else:
        if floor is None:
            reasons.append(
                f"driver {driver_text} is below {release.min_driver}, the minimum for {wanted}; CUDA {cuda[0]}.x has "
                "no minor-version compatibility"
            )
        else:
            reasons.append(
                f"driver {driver_text} is below {floor}, the CUDA {cuda[0]}.x minor-version floor (native minimum for "
                f"{wanted}: {release.min_driver})"
            )
        possible, forward = _forward_compat(driver_text, driver, cuda, gpu_name)
        reasons.extend(forward)
        mode = "forward_compat" if possible else "incompatible"
        if not possible and max_cuda:
            reasons.append(
                f"fix: upgrade the driver to >= {release.min_driver} for {wanted}, or use CUDA {max_cuda} or older, "
                f"which driver {driver_text} runs natively"
            )
        elif not possible:
            reasons.append(
                f"fix: upgrade the driver to >= {release.min_driver} for {wanted}; driver {driver_text} is older than "
                "every CUDA release in the table (10.0 onwards)"
            )

    if cuda[0] >= CUDA_DROPPED_PRE_TURING and gpu_name and _PRE_TURING.search(" ".join(gpu_name.upper().split())):
        reasons.append(
            f"'{gpu_name}' is a Maxwell/Pascal/Volta GPU: CUDA 13.0 removed offline compilation and library support "
            "for these architectures, so CUDA 13 builds and libraries will not run on it; use CUDA 12.x"
        )
    if max_cuda is not None and max_cuda == _minor_label(CUDA_RELEASES[0].version):
        reasons.append(f"max_cuda {max_cuda} is the newest release in the table; the driver may support newer ones")
    if mode == "native" and len(cuda) == MAJOR_MINOR:
        newer = later_updates(release, driver)
        if newer:
            needs = "; ".join(f"{r.label} needs >= {r.min_driver}" for r in newer)
            reasons.append(
                f"cuda_version '{cuda_version.strip()}' names no update, so it was checked as CUDA {release.label}; "
                f"later updates need a newer driver for native support ({needs}): pin the full toolkit version "
                f"(e.g. {format_version(newer[-1].version)}) to check the release you will run"
            )
    fm_match, fm_reasons = _fabric_manager(driver_text, driver, fabric_manager_version)
    reasons.extend(fm_reasons)

    return {
        "compatible": mode != "incompatible",
        "mode": mode,
        "min_driver": release.min_driver,
        "max_cuda": max_cuda,
        "fabric_manager_match": fm_match,
        "datacenter_gpu": datacenter,
        "cuda_release": release.label,
        "reasons": reasons,
    }
