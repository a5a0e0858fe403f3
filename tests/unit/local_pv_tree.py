"""A local-volume discovery directory with the proc and sys trees and statvfs answers that describe it.

Shared by the local_pv module_utils and module tests. Mount lines are written in the kernel's mountinfo
format (proc(5)); sizes are what the fake statvfs reports.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ansible_collections.gpuops.cluster.plugins.module_utils.local_pv import GIB, check_local_volumes
from ansible_collections.gpuops.cluster.plugins.modules.local_pv import ARGUMENT_SPEC

ROOT = "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro"
PROC = "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw"
XFS_SUPER = "rw,attr2,inode64,logbufs=8,logbsize=32k,noquota"


class Tree:
    """A discovery directory plus the proc and sys trees and statvfs answers that describe it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.disks = tmp_path / "mnt" / "disks"
        self.disks.mkdir(parents=True)
        self.disks = self.disks.resolve()
        self.lines = [ROOT, PROC]
        self.sizes: dict[str, tuple[int, int]] = {}
        self.next_id = 100

    def volume(self, name: str) -> str:
        path = self.disks / name
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def mount(
        self,
        mount_point: str,
        devno: str,
        fstype: str,
        source: str,
        *,
        options: str = "rw,noatime",
        super_options: str = XFS_SUPER,
        root: str = "/",
        gib: tuple[int, int] = (1800, 1700),
    ) -> None:
        """Add a mountinfo line; ``gib`` = (size, free) that statvfs reports for it."""
        escaped = mount_point.replace(" ", "\\040")
        self.lines.append(
            f"{self.next_id} 22 {devno} {root} {escaped} {options} shared:{self.next_id} - {fstype} {source} "
            f"{super_options}"
        )
        self.next_id += 1
        self.sizes[mount_point] = gib

    def uevent(self, devno: str, name: str) -> None:
        folder = self.tmp / "sys" / "dev" / "block" / devno
        folder.mkdir(parents=True)
        major, minor = devno.split(":")
        folder.joinpath("uevent").write_text(f"MAJOR={major}\nMINOR={minor}\nDEVNAME={name}\nDEVTYPE=disk\n")

    def statvfs(self, path: str) -> SimpleNamespace:
        size, free = self.sizes[path]
        return SimpleNamespace(f_frsize=4096, f_bsize=4096, f_blocks=size * GIB // 4096, f_bavail=free * GIB // 4096)

    def check(self, **kwargs) -> dict:
        proc = self.tmp / "proc" / "self"
        proc.mkdir(parents=True, exist_ok=True)
        proc.joinpath("mountinfo").write_text("\n".join(self.lines) + "\n")
        kwargs.setdefault("path", str(self.disks))
        kwargs.setdefault("statvfs", self.statvfs)
        return check_local_volumes(proc_root=str(self.tmp / "proc"), sys_root=str(self.tmp / "sys"),
                                   **{**module_defaults(), **kwargs})


def module_defaults() -> dict:
    """The module's option defaults (its spec is their one home), as check_local_volumes takes them."""
    names = ("allowed_fstypes", "required_options", "min_free_gib", "min_volumes")
    return {name: ARGUMENT_SPEC[name]["default"] for name in names}
