#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_pv
short_description: Check that a local-volume discovery directory holds one suitable filesystem per volume
version_added: "0.1.0"
description:
  - The Kubernetes local-static-provisioner turns every mount point under its discovery directory
    (O(path), V(/mnt/disks) by default) into a PersistentVolume. This module checks each entry of that directory
    before the provisioner is deployed.
  - Each entry must be its own mounted filesystem (not a plain directory on the root disk, not a bind mount from
    the root filesystem, not an overlay), of a type in O(allowed_fstypes), mounted with every option in
    O(required_options), writable, with nothing mounted inside it, not sharing its filesystem with another entry,
    and with at least O(min_free_gib) GiB free.
  - Reads C(/proc/self/mountinfo), C(/sys/dev/block) and C(statvfs) only; it never changes anything.
  - Problems are an answer (RV(ok=false)) unless O(fail_on_problems=true). Bad parameters and an unreadable mount
    table fail the task.
author:
  - gpuops.cluster maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.cluster.host_roots
  - gpuops.cluster.read_only
options:
  path:
    description: The provisioner's discovery directory; every entry in it is checked as one volume.
    type: path
    default: /mnt/disks
  allowed_fstypes:
    description: Filesystem types a volume may have.
    type: list
    elements: str
    default: [xfs, ext4]
  required_options:
    description:
      - Mount options every volume must have. Both the per-mount options and the filesystem (super block) options
        are searched. V(name) also matches V(name=value); V(name=value) must match exactly.
    type: list
    elements: str
    default: [noatime]
  min_free_gib:
    description:
      - Minimum free space per volume in GiB, as available to unprivileged users (C(statvfs) C(f_bavail)).
      - V(0) disables the check.
    type: float
    default: 10
  min_volumes:
    description:
      - Minimum number of usable volumes. With the default V(1) an empty directory is a problem; set V(0) to
        accept it.
    type: int
    default: 1
  fail_on_problems:
    description: Fail the task when RV(ok) is false, instead of only reporting it.
    type: bool
    default: false
notes:
  - Block-mode volumes (device files or symlinks to them in the discovery directory) are not checked; such entries
    are reported as problems.
seealso:
  - name: Kubernetes local static provisioner, operations
    description: How disks are expected to be laid out in the discovery directory.
    link: https://github.com/kubernetes-sigs/sig-storage-local-static-provisioner/blob/master/docs/operations.md
"""

EXAMPLES = r"""
- name: Check the local volumes before deploying the provisioner
  gpuops.cluster.local_pv:
    path: /mnt/disks
    min_free_gib: 100
    min_volumes: 2
  register: __local_pv_check

- name: Refuse with the problems found
  ansible.builtin.assert:
    that: __local_pv_check.ok
    fail_msg: "{{ __local_pv_check.msg }}"

- name: Or fail in the module itself, accepting btrfs
  gpuops.cluster.local_pv:
    allowed_fstypes: [xfs, ext4, btrfs]
    fail_on_problems: true
"""

RETURN = r"""
ok:
  description: Whether every entry is a usable volume and at least O(min_volumes) were found.
  returned: always
  type: bool
  sample: false
msg:
  description: One-line summary, listing each problem with its volume.
  returned: always
  type: str
  sample: "1 of 2 local volume(s) under /mnt/disks are usable; problems: /mnt/disks/vol2: mount options lack
    noatime (has rw,relatime): add noatime to its /etc/fstab entry and remount"
problems:
  description: Problems with the directory as a whole (missing, empty, too few usable volumes).
  returned: always
  type: list
  elements: str
  sample: []
mounts_file:
  description: The mount table that was read.
  returned: always
  type: str
  sample: /proc/self/mountinfo
volumes:
  description: One entry per item in the discovery directory, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The entry's path under O(path).
      type: str
      sample: /mnt/disks/vol1
    device:
      description: Device holding the filesystem; V(null) when the entry is not a mount point.
      type: str
      sample: /dev/nvme1n1
    devno:
      description: The filesystem's C(major:minor); V(null) when unknown.
      type: str
      sample: "259:1"
    fstype:
      description: Filesystem type; V(null) when the entry is not a mount point.
      type: str
      sample: xfs
    options:
      description: Per-mount options.
      type: list
      elements: str
      sample: [rw, noatime]
    size:
      description: Filesystem size in bytes; V(null) when not measured.
      type: int
      sample: 1920383410176
    free:
      description: Bytes available to unprivileged users; V(null) when not measured.
      type: int
      sample: 1919023616000
    ok:
      description: Whether this volume has no problems.
      type: bool
      sample: true
    problems:
      description: What is wrong with this volume and how to fix it.
      type: list
      elements: str
      sample: []
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.host_roots import HOST_ROOTS_ARGS
from ansible_collections.gpuops.cluster.plugins.module_utils.local_pv import check_local_volumes

ARGUMENT_SPEC = {
    "path": {"type": "path", "default": "/mnt/disks"},
    "allowed_fstypes": {"type": "list", "elements": "str", "default": ["xfs", "ext4"]},
    "required_options": {"type": "list", "elements": "str", "default": ["noatime"]},
    "min_free_gib": {"type": "float", "default": 10},
    "min_volumes": {"type": "int", "default": 1},
    "fail_on_problems": {"type": "bool", "default": False},
    **HOST_ROOTS_ARGS,
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        result = check_local_volumes(
            path=params["path"],
            allowed_fstypes=params["allowed_fstypes"],
            required_options=params["required_options"],
            min_free_gib=params["min_free_gib"],
            min_volumes=params["min_volumes"],
            proc_root=params["_proc_root"],
            sys_root=params["_sysfs_root"],
        )
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if params["fail_on_problems"] and not result["ok"]:
        module.fail_json(changed=False, **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
