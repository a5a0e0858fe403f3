"""package_lock module: look() reads this machine's real /proc (locks, the holder's cmdline and cgroup) and names the
process that holds a lock on one of the given files: here a child process holding a POSIX lock, as apt does."""

from __future__ import annotations

import subprocess
import sys

from ansible_collections.gpuops.cluster.plugins.modules import package_lock as module

HOLD = "import fcntl, sys; f = open(sys.argv[1], 'w'); fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); " \
       "sys.stdin.read()"


def test_look_names_the_process_holding_a_lock_and_nothing_once_it_is_released(tmp_path):
    path = tmp_path / "lock-frontend"
    path.touch()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        [found] = module.look([str(path), str(tmp_path / "absent")])
        assert (found.path, found.pid) == (str(path), holder.pid)
        assert "fcntl.lockf" in found.command
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert module.look([str(path)]) == []
