# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The one writer of controller files (action write_objects, the preflight reports): atomic, with exact modes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def make_dirs(path: Path, mode: int) -> None:
    """``path`` and every missing directory above it, each with the file ``mode`` plus the search bit wherever it
    grants read (0644 gives 0755, 0640 gives 0750), whatever the umask; an existing one is left as it is
    (os.makedirs would give the parents the default mode: a report folder's parent came out 0755)."""
    directory_mode = mode | (mode & 0o444) >> 2
    for directory in reversed([d for d in (path, *path.parents) if not d.is_dir()]):
        try:
            directory.mkdir(mode=directory_mode)  # never wider than it ends, the umask aside
        except FileExistsError:  # another host's write made it first
            continue
        directory.chmod(directory_mode)


def write_file(path: Path, text: str, mode: int, check: bool = False) -> bool:
    """Whether ``path`` needed writing: a file whose text and mode are already these is left alone; else (unless
    ``check``) ``text`` is written to a temporary file of its own beside it (the hosts of a play write into one
    directory at the same time), given ``mode``, and renamed over ``path``; missing directories by make_dirs."""
    try:
        if (path.read_text(encoding="utf-8"), path.stat().st_mode & 0o777) == (text, mode):
            return False
    except (OSError, UnicodeDecodeError):
        pass
    if not check:
        make_dirs(path.parent, mode)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as tmp_file:
            tmp_file.write(text)
        os.chmod(tmp_name, mode)
        os.replace(tmp_name, path)
    return True
