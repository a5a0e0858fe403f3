# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""Local persistent volumes: is each entry of the discovery directory its own, suitable filesystem?

The Kubernetes local-static-provisioner turns every mount point under its discovery directory
(``/mnt/disks`` by default) into a PersistentVolume. A plain directory there puts the data on whatever disk
holds the directory (often the root disk), and two entries on one filesystem count its capacity twice.

Pure functions, no Ansible imports. The ``/proc`` and ``/sys`` roots and ``statvfs`` are parameters so tests
can point them at fixture trees.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, NamedTuple

from ansible_collections.gpuops.cluster.plugins.module_utils.host_facts import free_space, parse_key_values
from ansible_collections.gpuops.cluster.plugins.module_utils.host_roots import read_text

GIB = 1024**3
MOUNTINFO_MIN_FIELDS = 6  # fields before the optional ones: id, parent, major:minor, root, mount point, options
UNION_FSTYPES = frozenset(("overlay", "aufs", "fuse-overlayfs"))

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


class Mount(NamedTuple):
    mount_id: int
    parent_id: int
    devno: str  # "major:minor"
    root: str  # path inside the filesystem that is mounted here ("/" unless a bind mount)
    mount_point: str
    mount_options: tuple[str, ...]  # per-mount (VFS) options: rw, noatime, ...
    fstype: str
    source: str
    super_options: tuple[str, ...]  # per-superblock (filesystem) options


def unescape(field: str) -> str:
    """Undo the kernel's octal escapes in mount fields: ``\\040`` space, ``\\011`` tab, ``\\012``, ``\\134``."""
    return _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def _options(field: str) -> tuple[str, ...]:
    return tuple(option for option in field.split(",") if option)


def parse_mountinfo(text: str, origin: str = "/proc/self/mountinfo") -> list[Mount]:
    """Parse proc(5) mountinfo: ``36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=...``"""
    mounts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split(" ")
        try:
            separator = fields.index("-", MOUNTINFO_MIN_FIELDS)
        except ValueError:
            raise ValueError(
                f"{origin} line {number} has no ' - ' separator after its six leading fields; raw line: {line!r}"
            ) from None
        if len(fields) < separator + 3:
            raise ValueError(
                f"{origin} line {number} lacks the filesystem type and source after ' - '; raw line: {line!r}"
            )
        try:
            mount_id, parent_id = int(fields[0]), int(fields[1])
        except ValueError:
            raise ValueError(f"{origin} line {number}: mount IDs are not integers; raw line: {line!r}") from None
        if not re.match(r"^\d+:\d+$", fields[2]):
            raise ValueError(f"{origin} line {number}: '{fields[2]}' is not major:minor; raw line: {line!r}")
        mounts.append(
            Mount(
                mount_id=mount_id,
                parent_id=parent_id,
                devno=fields[2],
                root=unescape(fields[3]),
                mount_point=unescape(fields[4]),
                mount_options=_options(fields[5]),
                fstype=unescape(fields[separator + 1]),
                source=unescape(fields[separator + 2]),
                super_options=_options(fields[separator + 3]) if len(fields) > separator + 3 else (),
            )
        )
    return mounts


def read_mounts(proc_root: str) -> tuple[list[Mount], str]:
    """Mounts seen by this process, from mountinfo (every kernel since 2.6.26 has it); and the file that was read."""
    origin = os.path.join(proc_root, "self", "mountinfo")
    if not os.path.exists(origin):
        raise ValueError(f"{origin} does not exist: is /proc mounted on the target?")
    with open(origin, encoding="utf-8", errors="surrogateescape") as handle:  # paths as os.path reads them
        return parse_mountinfo(handle.read(), origin), origin


def device_name(mount: Mount, sys_root: str) -> str:
    """A readable device for a mount: its /dev source, else DEVNAME from /sys/dev/block/<major:minor>/uevent."""
    if mount.source.startswith("/dev/") and mount.source != "/dev/root":
        return mount.source
    uevent = read_text(os.path.join(sys_root, "dev", "block", mount.devno, "uevent"))
    name = parse_key_values(uevent or "").get("DEVNAME")
    return "/dev/" + name if name else mount.source


def _top(stack: list[Mount]) -> Mount:
    """The visible mount when several are stacked on one mount point: the one no other is mounted over."""
    covered = {m.parent_id for m in stack}
    visible = [m for m in stack if m.mount_id not in covered]
    return visible[-1] if visible else stack[-1]


def _containing(path: str, table: dict[str, list[Mount]]) -> tuple[str, Mount] | None:
    """The mount point a path lives on (longest prefix)."""
    candidate = path
    while True:
        if candidate in table:
            return candidate, _top(table[candidate])
        parent = os.path.dirname(candidate)
        if parent == candidate:
            return None
        candidate = parent


def _has_option(required: str, present: set[str]) -> bool:
    if required in present:
        return True
    if "=" in required:
        return False
    return any(option.split("=", 1)[0] == required for option in present)


def validate_params(
    path: str, allowed_fstypes: list[str], required_options: list[str], min_free_gib: float, min_volumes: int
) -> None:
    if not path or not os.path.isabs(path):
        raise ValueError(f"path '{path}' must be an absolute directory path, e.g. /mnt/disks")
    if not allowed_fstypes or any(not str(fstype).strip() for fstype in allowed_fstypes):
        raise ValueError(
            f"allowed_fstypes {allowed_fstypes!r} must list at least one filesystem type, e.g. [xfs, ext4]"
        )
    if any(not str(option).strip() or "," in str(option) for option in required_options):
        raise ValueError(
            f"required_options {required_options!r} must list single mount options without commas, e.g. [noatime]"
        )
    if min_free_gib < 0:
        raise ValueError(f"min_free_gib is {min_free_gib:g}; expected 0 or more GiB")
    if min_volumes < 0:
        raise ValueError(f"min_volumes is {min_volumes}; expected 0 or more")


def _check_mount(
    volume: dict[str, Any],
    real: str,
    table: dict[str, list[Mount]],
    root: Mount | None,
    settings: dict[str, Any],
) -> Mount | None:
    """Fill one volume's facts and problems; return its visible mount (None when it is not a mount point)."""
    problems = volume["problems"]
    stack = table.get(real)
    if not stack:
        where = _containing(real, table)
        if where is None or where[0] == "/":
            host = "the root filesystem"
        else:
            host = f"the {where[1].fstype} filesystem mounted at {where[0]}"
        problems.append(
            f"not a mount point: a plain directory on {host}, so the volume's data would land there; mount a "
            "dedicated disk or partition here (one filesystem per volume, listed in /etc/fstab)"
        )
        return None
    mount = _top(stack)
    volume.update(
        device=device_name(mount, settings["sys_root"]),
        devno=mount.devno,
        fstype=mount.fstype,
        options=list(mount.mount_options),
    )
    if len(stack) > 1:
        problems.append(
            f"{len(stack)} filesystems are mounted on top of each other here ("
            + ", ".join(f"{m.fstype} {m.source}" for m in stack)
            + f"); only {mount.source} is visible: unmount the others"
        )
    if mount.fstype in UNION_FSTYPES:
        problems.append(f"{mount.fstype} is a union (container) filesystem, not a local disk: mount a real disk here")
    elif mount.fstype not in settings["allowed_fstypes"]:
        problems.append(
            f"filesystem type {mount.fstype}, expected one of {', '.join(settings['allowed_fstypes'])}: reformat it "
            "(e.g. mkfs.xfs) or add the type to allowed_fstypes"
        )
    if root is not None and mount is not root and mount.devno == root.devno:
        problems.append(
            f"bind mount of {mount.root} from the root filesystem (device {mount.devno}, same as /): the data would "
            "land on the root disk; mount a dedicated disk or partition here"
        )
    present = set(mount.mount_options) | set(mount.super_options)
    missing = [option for option in settings["required_options"] if not _has_option(option, present)]
    if missing:
        problems.append(
            f"mount options lack {', '.join(missing)} (has {','.join(mount.mount_options)}): add "
            f"{','.join(missing)} to its /etc/fstab entry and remount"
        )
    if "ro" in mount.mount_options:
        problems.append("mounted read-only (ro): pods could not write to it; remount it rw")
    nested = sorted(mp for mp in table if mp.startswith(real.rstrip("/") + "/"))
    if nested:
        problems.append(
            f"other filesystems are mounted inside it ({', '.join(nested)}): the volume's capacity and contents "
            "are not one disk; unmount them or move them out of the discovery directory"
        )
    return mount


def check_local_volumes(  # the module's options (their defaults are its spec's), then what tests inject
    *,
    path: str,
    allowed_fstypes: list[str],
    required_options: list[str],
    min_free_gib: float,
    min_volumes: int,
    proc_root: str,
    sys_root: str,
    statvfs: Callable[[str], Any] = os.statvfs,
) -> dict[str, Any]:
    """Check every entry of the discovery directory ``path``; return ``{ok, msg, volumes, problems, mounts_file}``.

    Each volume: ``{path, device, devno, fstype, options, size, free, ok, problems}``; size and free in bytes
    (free = space available to unprivileged users, statvfs f_bavail). Raises ValueError on bad parameters or an
    unreadable mount table; everything else, including an empty or missing directory, is an answer.
    """
    validate_params(path, allowed_fstypes, required_options, min_free_gib, min_volumes)
    problems: list[str] = []
    volumes: list[dict[str, Any]] = []
    mounts, mounts_file = read_mounts(proc_root)
    result: dict[str, Any] = {"path": path, "volumes": volumes, "problems": problems, "mounts_file": mounts_file}

    if not os.path.isdir(path):
        state = "is not a directory" if os.path.exists(path) else "does not exist"
        problems.append(f"discovery directory {path} {state}: create it and mount one filesystem per volume under it")
        return _summarise(result, min_volumes)

    table: dict[str, list[Mount]] = {}
    for mount in mounts:
        table.setdefault(mount.mount_point, []).append(mount)
    root = _top(table["/"]) if "/" in table else None
    settings = {"allowed_fstypes": allowed_fstypes, "required_options": required_options, "sys_root": sys_root}
    visible: dict[str, Mount] = {}
    for name in sorted(os.listdir(path)):
        vpath = os.path.join(path, name)
        volume = {
            "path": vpath,
            "device": None,
            "devno": None,
            "fstype": None,
            "options": [],
            "size": None,
            "free": None,
            "ok": False,
            "problems": [],
        }
        volumes.append(volume)
        if not os.path.isdir(vpath):
            volume["problems"].append(
                "not a directory: this check covers filesystem-mode volumes, one mounted directory per volume"
            )
            continue
        real = os.path.realpath(vpath)
        mount = _check_mount(volume, real, table, root, settings)
        if mount is None:
            continue
        visible[vpath] = mount
        space = free_space(real, statvfs)
        if space["error"]:
            volume["problems"].append(f"statvfs failed: {space['error']}")
            continue
        volume["size"], volume["free"] = space["total_bytes"], space["free_bytes"]
        if volume["free"] < min_free_gib * GIB:
            volume["problems"].append(
                f"{volume['free'] / GIB:.1f} GiB free of {volume['size'] / GIB:.1f} GiB, below min_free_gib "
                f"{min_free_gib:g} GiB: use a larger disk or free space on it"
            )

    _mark_shared(volumes, visible)
    return _summarise(result, min_volumes)


def _mark_shared(volumes: list[dict[str, Any]], visible: dict[str, Mount]) -> None:
    """Two entries on one filesystem: its capacity would be offered twice."""
    groups: dict[str, list[str]] = {}
    for vpath, mount in visible.items():
        groups.setdefault(mount.devno, []).append(vpath)
    for volume in volumes:
        mount = visible.get(volume["path"])
        if mount is None:
            continue
        others = [other for other in groups[mount.devno] if other != volume["path"]]
        if others:
            volume["problems"].append(
                f"same filesystem ({volume['device']}, device {mount.devno}) is also mounted at "
                f"{', '.join(others)}: each local volume needs its own filesystem, or its capacity is counted twice"
            )


def _summarise(result: dict[str, Any], min_volumes: int) -> dict[str, Any]:
    volumes, problems, path = result["volumes"], result["problems"], result["path"]
    for volume in volumes:
        volume["ok"] = not volume["problems"]
    usable = [volume["path"] for volume in volumes if volume["ok"]]
    if os.path.isdir(path):  # a missing directory is already reported
        if not volumes and min_volumes > 0:
            problems.append(f"no volumes under {path}: mount one filesystem per local volume at {path}/<name>")
        elif len(usable) < min_volumes:
            problems.append(f"{len(usable)} usable volume(s) under {path}, min_volumes is {min_volumes}")
    result["ok"] = not problems and all(volume["ok"] for volume in volumes)
    bad = [f"{v['path']}: {'; '.join(v['problems'])}" for v in volumes if not v["ok"]]
    if not volumes and problems:
        result["msg"] = " | ".join(problems)
    elif result["ok"]:
        result["msg"] = f"{len(usable)} local volume(s) under {path} are usable" + (
            f": {', '.join(usable)}" if usable else ""
        )
    else:
        result["msg"] = (
            f"{len(usable)} of {len(volumes)} local volume(s) under {path} are usable; problems: "
            + " | ".join(problems + bad)
        )
    return result
