"""Each host's health settings as roles/health/tasks/sweep.yml records them (``reboot``, ``timeout``,
``report_dir``), at the role's defaults: what health_steps.host_steps is given for a host that sets none."""

from __future__ import annotations

from pathlib import Path

import yaml

_DEFAULTS = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles/health/defaults/main.yml").read_text())
HOST_SETTINGS = {"reboot": _DEFAULTS["health_reboot"], "timeout": _DEFAULTS["health_timeout"],
                 "report_dir": _DEFAULTS["health_node_report_dir"]}
