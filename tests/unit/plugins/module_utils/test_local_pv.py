"""local_pv: one suitable filesystem per entry of the local-volume discovery directory (the module: ../modules).

Each test builds a fixture tree in tmp_path (tests/unit/local_pv_tree.py): a discovery directory, a
proc/self/mountinfo written in the kernel's format (proc(5)), an optional sys/dev/block/<major:minor>/uevent,
and a fake statvfs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.cluster.plugins.module_utils.local_pv import (
    GIB,
    check_local_volumes,
    parse_mountinfo,
    unescape,
)
from local_pv_tree import XFS_SUPER, Tree, module_defaults


@pytest.fixture
def tree(tmp_path) -> Tree:
    return Tree(tmp_path)


def test_good_volume(tree):
    vol = tree.volume("nvme1n1")
    tree.mount(vol, "259:5", "xfs", "/dev/nvme1n1")
    result = tree.check()
    assert result["ok"] is True
    assert result["problems"] == []
    assert result["volumes"] == [
        {
            "path": vol,
            "device": "/dev/nvme1n1",
            "devno": "259:5",
            "fstype": "xfs",
            "options": ["rw", "noatime"],
            "size": 1800 * GIB,
            "free": 1700 * GIB,
            "ok": True,
            "problems": [],
        }
    ]
    assert result["msg"] == f"1 local volume(s) under {tree.disks} are usable: {vol}"
    assert result["mounts_file"].endswith("proc/self/mountinfo")


def test_plain_directory_on_the_root_filesystem(tree):
    vol = tree.volume("vol1")
    volume = tree.check()["volumes"][0]
    assert (volume["path"], volume["ok"], volume["device"], volume["size"]) == (vol, False, None, None)
    assert volume["problems"] == [
        "not a mount point: a plain directory on the root filesystem, so the volume's data would land there; mount "
        "a dedicated disk or partition here (one filesystem per volume, listed in /etc/fstab)"
    ]


def test_plain_directory_on_a_data_filesystem_names_it(tree):
    tree.volume("vol1")
    tree.mount(str(tree.disks), "259:9", "ext4", "/dev/sdb1")  # the discovery directory itself is one disk
    problem = tree.check()["volumes"][0]["problems"][0]
    assert problem.startswith(f"not a mount point: a plain directory on the ext4 filesystem mounted at {tree.disks},")


def test_overlay_is_not_a_disk(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "0:52", "overlay", "overlay", super_options="rw,lowerdir=/l,upperdir=/u,workdir=/w")
    result = tree.check()
    assert result["ok"] is False
    assert result["volumes"][0]["problems"] == [
        "overlay is a union (container) filesystem, not a local disk: mount a real disk here"
    ]


def test_btrfs_is_not_an_allowed_type(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "0:45", "btrfs", "/dev/sdc", super_options="rw,ssd,space_cache=v2,subvolid=5,subvol=/")
    assert tree.check()["volumes"][0]["problems"] == [
        "filesystem type btrfs, expected one of xfs, ext4: reformat it (e.g. mkfs.xfs) or add the type to "
        "allowed_fstypes"
    ]
    assert tree.check(allowed_fstypes=["xfs", "ext4", "btrfs"])["ok"] is True


def test_missing_noatime(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "259:5", "ext4", "/dev/nvme1n1", options="rw,relatime", super_options="rw")
    volume = tree.check()["volumes"][0]
    assert volume["options"] == ["rw", "relatime"]
    assert volume["problems"] == [
        "mount options lack noatime (has rw,relatime): add noatime to its /etc/fstab entry and remount"
    ]


def test_required_options_are_found_in_super_options_and_match_values(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "259:5", "xfs", "/dev/nvme1n1", super_options="rw,attr2,inode64,logbufs=8,prjquota")
    assert tree.check(required_options=["noatime", "prjquota", "logbufs"])["ok"] is True
    assert tree.check(required_options=["logbufs=8"])["ok"] is True
    problems = tree.check(required_options=["logbufs=4"])["volumes"][0]["problems"]
    assert problems == [
        "mount options lack logbufs=4 (has rw,noatime): add logbufs=4 to its /etc/fstab entry and remount"
    ]


def test_too_small(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "259:5", "xfs", "/dev/nvme1n1", gib=(8, 5))
    volume = tree.check(min_free_gib=10)["volumes"][0]
    assert (volume["size"], volume["free"]) == (8 * GIB, 5 * GIB)
    assert volume["problems"] == [
        "5.0 GiB free of 8.0 GiB, below min_free_gib 10 GiB: use a larger disk or free space on it"
    ]
    assert tree.check(min_free_gib=5)["ok"] is True  # exactly 5 GiB free meets 5


def test_nested_mount_inside_a_volume(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "259:5", "xfs", "/dev/nvme1n1")
    tree.mount(f"{vol}/cache", "259:6", "xfs", "/dev/nvme2n1")
    (Path(vol) / "cache").mkdir()
    result = tree.check()
    assert [v["path"] for v in result["volumes"]] == [vol]  # only direct entries are volumes
    assert result["volumes"][0]["problems"] == [
        f"other filesystems are mounted inside it ({vol}/cache): the volume's capacity and contents are not one "
        "disk; unmount them or move them out of the discovery directory"
    ]


def test_one_filesystem_under_two_names(tree):
    first, second = tree.volume("a"), tree.volume("b")
    tree.mount(first, "259:7", "xfs", "/dev/nvme3n1", root="/a")
    tree.mount(second, "259:7", "xfs", "/dev/nvme3n1", root="/b")
    volumes = tree.check()["volumes"]
    assert volumes[0]["problems"] == [
        f"same filesystem (/dev/nvme3n1, device 259:7) is also mounted at {second}: each local volume needs its "
        "own filesystem, or its capacity is counted twice"
    ]
    assert volumes[1]["problems"] == [
        f"same filesystem (/dev/nvme3n1, device 259:7) is also mounted at {first}: each local volume needs its "
        "own filesystem, or its capacity is counted twice"
    ]


def test_stacked_mounts_on_one_point(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "259:5", "xfs", "/dev/nvme1n1")
    tree.lines.append(f"150 100 259:6 / {vol} rw,noatime shared:150 - xfs /dev/nvme2n1 {XFS_SUPER}")
    volume = tree.check()["volumes"][0]
    assert volume["device"] == "/dev/nvme2n1"  # mount 150 covers mount 100
    assert volume["problems"] == [
        "2 filesystems are mounted on top of each other here (xfs /dev/nvme1n1, xfs /dev/nvme2n1); only "
        "/dev/nvme2n1 is visible: unmount the others"
    ]


def test_bind_mount_from_the_root_filesystem(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "259:2", "ext4", "/dev/nvme0n1p2", root="/srv/vol1", super_options="rw,errors=remount-ro")
    assert tree.check()["volumes"][0]["problems"] == [
        "bind mount of /srv/vol1 from the root filesystem (device 259:2, same as /): the data would land on the root "
        "disk; mount a dedicated disk or partition here"
    ]


def test_read_only_mount(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "259:5", "xfs", "/dev/nvme1n1", options="ro,noatime")
    assert tree.check()["volumes"][0]["problems"] == [
        "mounted read-only (ro): pods could not write to it; remount it rw"
    ]


def test_dev_root_is_named_through_sys(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "259:8", "ext4", "/dev/root", super_options="rw")
    tree.uevent("259:8", "nvme4n1")
    assert tree.check()["volumes"][0]["device"] == "/dev/nvme4n1"


def test_escaped_space_in_mount_point(tree):
    vol = tree.volume("data disk")
    tree.mount(vol, "259:5", "xfs", "/dev/nvme1n1")
    assert "data\\040disk" in tree.lines[-1]
    result = tree.check()
    assert (result["ok"], result["volumes"][0]["path"]) == (True, vol)


def test_empty_directory(tree):
    result = tree.check()
    assert (result["ok"], result["volumes"]) == (False, [])
    assert result["problems"] == [
        f"no volumes under {tree.disks}: mount one filesystem per local volume at {tree.disks}/<name>"
    ]
    assert result["msg"] == result["problems"][0]
    assert tree.check(min_volumes=0)["msg"] == f"0 local volume(s) under {tree.disks} are usable"


def test_missing_directory(tree):
    result = tree.check(path=str(tree.disks / "absent"))
    assert result["ok"] is False
    assert result["problems"] == [
        f"discovery directory {tree.disks}/absent does not exist: create it and mount one filesystem per volume "
        "under it"
    ]
    assert result["msg"] == result["problems"][0]


def test_too_few_usable_volumes_and_a_stray_file(tree):
    good, plain = tree.volume("a"), tree.volume("b")
    tree.mount(good, "259:5", "xfs", "/dev/nvme1n1")
    (tree.disks / "notes.txt").write_text("not a volume\n")
    result = tree.check(min_volumes=2)
    assert [(v["path"], v["ok"]) for v in result["volumes"]] == [
        (good, True),
        (plain, False),
        (f"{tree.disks}/notes.txt", False),
    ]
    assert result["volumes"][2]["problems"] == [
        "not a directory: this check covers filesystem-mode volumes, one mounted directory per volume"
    ]
    assert result["problems"] == [f"1 usable volume(s) under {tree.disks}, min_volumes is 2"]
    assert result["msg"].startswith(f"1 of 3 local volume(s) under {tree.disks} are usable; problems: 1 usable")


def test_statvfs_failure_is_a_problem(tree):
    vol = tree.volume("vol1")
    tree.mount(vol, "259:5", "xfs", "/dev/nvme1n1")

    def broken(path):
        raise OSError(5, "Input/output error", path)

    result = tree.check(statvfs=broken)
    assert result["volumes"][0]["problems"] == [f"statvfs failed: [Errno 5] Input/output error: '{vol}'"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"path": "mnt/disks"}, r"path 'mnt/disks' must be an absolute directory path"),
        ({"allowed_fstypes": []}, r"allowed_fstypes \[\] must list at least one"),
        ({"required_options": ["noatime,nodiratime"]}, r"single mount options without commas"),
        ({"min_free_gib": -1}, r"min_free_gib is -1; expected 0 or more"),
        ({"min_volumes": -2}, r"min_volumes is -2; expected 0 or more"),
    ],
)
def test_bad_parameters_raise(tree, kwargs, message):
    with pytest.raises(ValueError, match=message):
        tree.check(**kwargs)


# --- parsing ------------------------------------------------------------------------------------------------------


def test_parse_mountinfo_fields():
    text = (
        "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"  # proc(5) example
        "40 22 259:5 / /mnt/disks/my\\040vol rw,noatime shared:30 master:2 propagate_from:1 - xfs /dev/nvme1n1 rw\n"
        "41 22 0:60 / /run/user/1000 rw,nosuid,nodev,relatime - tmpfs tmpfs rw,size=100k,mode=700\n"
    )
    first, second, third = parse_mountinfo(text)
    assert (first.mount_id, first.parent_id) == (36, 35)
    assert (first.devno, first.root, first.mount_point) == ("98:0", "/mnt1", "/mnt/parent")
    assert first.mount_options == ("rw", "noatime")
    assert (first.fstype, first.source, first.super_options) == ("ext3", "/dev/root", ("rw", "errors=continue"))
    assert (second.mount_point, second.fstype, second.source) == ("/mnt/disks/my vol", "xfs", "/dev/nvme1n1")
    assert (third.fstype, third.super_options) == ("tmpfs", ("rw", "size=100k", "mode=700"))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 ext3 /dev/root rw", r"has no ' - ' separator"),
        ("36 35 98:0 /mnt1 /mnt/parent rw - ext3", r"lacks the filesystem type and source"),
        ("x 35 98:0 / /m rw - ext3 /dev/sda rw", r"mount IDs are not integers"),
        ("36 35 sda / /m rw - ext3 /dev/sda rw", r"'sda' is not major:minor"),
    ],
)
def test_parse_mountinfo_rejects_damaged_lines_with_the_raw_line(line, message):
    with pytest.raises(ValueError, match=message) as raised:
        parse_mountinfo(line)
    assert repr(line) in str(raised.value)


def test_unescape_octal():
    assert unescape("a\\040b\\011c\\134d") == "a b\tc\\d"


def test_no_mount_table_is_an_error(tmp_path):
    """/proc/mounts is no fallback: it lacks device numbers and bind-mount roots, which the checks need."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text("/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n")
    with pytest.raises(ValueError, match=r"proc/self/mountinfo does not exist: is /proc mounted on the target\?"):
        check_local_volumes(path=str(tmp_path), proc_root=str(tmp_path / "proc"), sys_root=str(tmp_path / "sys"),
                            **module_defaults())
