"""upgrade_driver decisions on dpkg-query and nvidia-smi outputs (Debian 12's 535 packages as the driver
scenario's mirror offers them; nvidia-smi's --query-compute-apps CSV)."""

from __future__ import annotations

import diagnose_recorded as R
import pytest
from ansible_collections.gpuops.cluster.plugins.filter.driver import driver_upgrade_plan
from ansible_collections.gpuops.cluster.plugins.plugin_utils import driver_upgrade as U
from ansible_collections.gpuops.cluster.plugins.plugin_utils.plan import dcgm_cuda_major

PROCS = "1843, /usr/bin/python3, 30512 MiB\n1910, /opt/conda/bin/torchrun, 1024 MiB\n"


def test_installed_driver():
    assert U.installed_driver(R.DPKG_535_261) == "535.261.03"
    assert U.installed_driver(R.DPKG_CUDA_REPO_565) == "565.57.01"
    assert U.installed_driver("nvidia-container-toolkit 1.17.8-1\n") is None
    # a partial upgrade (packages of two versions at once, in either order): the highest
    for mixed in (R.DPKG_535_261 + R.DPKG_CUDA_REPO_565, R.DPKG_CUDA_REPO_565 + R.DPKG_535_261):
        assert U.installed_driver(mixed) == "565.57.01"
    assert U.upstream("1:535.261.03-1~deb12u1") == "535.261.03"


def test_installed_driver_from_rpm_output():
    # RHEL 9: no package is named nvidia-driver; kmod-nvidia-latest-dkms and nvidia-driver-cuda carry the version.
    assert U.installed_driver(R.RPM_RHEL9_550) == "550.90.07"
    assert U.installed_driver(R.RPM_RHEL9_TOOLKIT_ONLY) is None
    assert U.upstream("3:550.90.07-1.el9") == "550.90.07"


@pytest.mark.parametrize(("target", "action"), [("565.57.01", "upgrade"), ("550.90.07", "none"),
                                                ("535.261.03", "downgrade")])
def test_actions_on_an_rpm_host(target, action):
    assert U.plan(R.RPM_RHEL9_550, target)["action"] == action


def test_downgrade_is_refused_on_an_rpm_host_too():
    refused = U.plan(R.RPM_RHEL9_550, "535.261.03")
    assert "535.261.03 is older than the installed driver 550.90.07" in refused["refuse"]
    assert U.plan(R.RPM_RHEL9_550, "535.261.03", allow_downgrade=True)["refuse"] is None


@pytest.mark.parametrize(("dpkg", "target", "action"), [
    (R.DPKG_535_261, "535.309.01", "upgrade"), (R.DPKG_535_309, "535.261.03", "downgrade"),
    (R.DPKG_535_261, "535.261.03", "none"), ("", "535.261.03", "install")])
def test_actions(dpkg, target, action):
    assert U.plan(dpkg, target)["action"] == action


@pytest.mark.parametrize(("target", "major"), [("570.172.08", 12), ("580.95.05", 13), ("535.309.01", 12)])
def test_the_plans_packages_move_with_the_driver_by_the_plans_rule(target, major):
    """upgrade apply.yml moves the host's plan part to the target: the pin and DCGM's CUDA major together (a 570 ->
    580 upgrade kept cuda12), by plan.dcgm_cuda_major, the rule preflight's plan uses."""
    assert U.plan(R.DPKG_535_261, target)["packages"] == {"driver": target, "dcgm_cuda_major": major}
    assert major == dcgm_cuda_major(target)


def test_downgrade_needs_allow_downgrade():
    refused = U.plan(R.DPKG_535_309, "535.261.03")
    assert "allow_downgrade=true" in refused["refuse"]
    assert U.plan(R.DPKG_535_309, "535.261.03", allow_downgrade=True)["refuse"] is None


def test_gpu_processes_refuse_unless_forced():
    procs = U.gpu_processes(PROCS, 0)
    assert len(procs) == 2  # noqa: PLR2004
    refused = U.plan(R.DPKG_535_261, "535.309.01", processes=procs)
    assert "2 GPU process(es) running (1843, /usr/bin/python3, 30512 MiB" in refused["refuse"]
    assert "force=true" in refused["refuse"]
    assert U.plan(R.DPKG_535_261, "535.309.01", processes=procs, force=True)["refuse"] is None
    assert U.plan(R.DPKG_535_261, "535.261.03", processes=procs)["refuse"] is None, "nothing to move"
    assert U.gpu_processes(R.NVIDIA_SMI_NO_DRIVER, 9) == []
    assert U.gpu_processes("No running processes found\n", 0) == []
    # Terminal codes and CR LF (driver 580's nvidia-smi, h200-driver580/SOURCES.md) do not reach the entries.
    assert U.gpu_processes("\x1b[1m" + PROCS.replace("\n", "\r\n") + "\x1b[0m", 0) == procs


def test_filter():
    out = driver_upgrade_plan(R.DPKG_535_261, target="535.309.01", processes_output=PROCS, processes_rc="0")
    assert out["action"] == "upgrade"
    assert out["refuse"]
