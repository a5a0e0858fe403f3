# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The one atomic file writer: on hosts for the modules (file_set, docker_daemon_config's invalid-file backup), on
the controller for plugin_utils (action write_objects, the preflight reports)."""

from __future__ import annotations

import os
import stat
import tempfile


def make_dirs(directory: str, mode: int) -> None:
    """``directory`` and every missing one above it, each with ``mode`` whatever the umask; an existing one is left
    as it is (os.makedirs gives the parents the umask's mode: a report folder's parent came out 0755)."""
    missing = []
    while directory and not os.path.isdir(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)  # never wider than it ends, the umask aside
        except FileExistsError:  # another writer made it first (the hosts of a play write into one directory)
            continue
        os.chmod(directory, mode)


def searchable(mode: int) -> int:
    """A file mode plus the search bit wherever it grants read (0640: 0750, 0644: 0755): its directories' mode."""
    return mode | (mode & 0o444) >> 2


def put(path: str, data: bytes | str, mode: int, uid: int = -1, gid: int = -1, directory_mode: int | None = None,
        check: bool = False) -> bool:
    """Whether the file at ``path`` differed from ``data`` (text is UTF-8), ``mode`` and the owner (-1: any; a link
    or a directory differs). Unless ``check``: a file whose content is right gets only chown and chmod (same inode);
    else the data goes to a temporary file of its own in the same directory (mkstemp: 0600, so a secret is never
    readable by others), synced, given the owner (-1: the writer's) and ``mode``, and renamed over ``path`` (a reader
    sees the old file or the new one); missing directories get ``directory_mode``, by default ``searchable(mode)``."""
    path, data = os.fspath(path), data.encode("utf-8") if isinstance(data, str) else data
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    same_content = found is not None and stat.S_ISREG(found.st_mode) and found.st_size == len(data)
    if same_content:
        with open(path, "rb") as current:
            same_content = current.read() == data
    if same_content and stat.S_IMODE(found.st_mode) == mode and uid in (-1, found.st_uid) and gid in (-1, found.st_gid):
        return False
    if check:
        return True
    if same_content:
        os.chown(path, uid, gid)
        os.chmod(path, mode)
        return True
    make_dirs(os.path.dirname(path), searchable(mode) if directory_mode is None else directory_mode)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
            os.fchown(tmp.fileno(), uid, gid)  # before chmod: a chown clears the set-id bits
            os.fchmod(tmp.fileno(), mode)
        os.replace(tmp_name, path)
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise
    return True
