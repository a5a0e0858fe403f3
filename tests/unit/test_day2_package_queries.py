"""The one reader of the installed driver (roles/upgrade's entry point installed, which upgrade_driver.yml's plan
and diagnose.yml's driver link both run), run here as written, with LABELLED stand-ins of dpkg-query and rpm alone on
PATH: on a Debian-family host dpkg-query is asked and rpm is not; on an RPM host rpm is asked, with the query format
whose "name version" lines the parsers read (plugins/plugin_utils/driver_upgrade.py, diagnose.py). The stand-ins print
output shaped like the real tools' (diagnose_recorded.py); that the real rpm renders the format so is tested
nowhere here (no rpm on this machine). And the one probe of the member workspaces (validate's entry point
workspaces, which diagnose runs too), with a stand-in docker."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import diagnose_recorded as R
import yaml
from ansible_collections.gpuops.cluster.plugins.plugin_utils import diagnose as D
from ansible_collections.gpuops.cluster.plugins.plugin_utils import driver_upgrade as U

REPO = Path(__file__).resolve().parents[2]
RPM_ARGS = ["-qa", "--qf", "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n", "*nvidia*", "cuda-drivers*"]


def _upgrade_command() -> str:
    return yaml.safe_load((REPO / "roles/upgrade/tasks/installed.yml").read_text())[0]["ansible.builtin.shell"]["cmd"]


def _role_files_with(text: str) -> list[str]:
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "roles").rglob("*.yml") if text in p.read_text())


def _run(command: str, tmp_path: Path, tools: dict[str, str], shell: str = "/bin/sh") -> tuple[str, dict]:
    """Run `command` with only the given stand-in tools on PATH; (stdout, {tool: argv it was called with})."""
    assert "{{" not in command, "the command is run verbatim: no Jinja in it"
    assert "{%" not in command, "the command is run verbatim: no Jinja in it"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool, output in tools.items():
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\n# LABELLED TEST STAND-IN for {tool}\n"
                          f"printf '%s\\n' \"$@\" > {tmp_path}/{tool}.argv\nprintf '%s' '{output}'\n")
        script.chmod(0o755)
    out = subprocess.run([shell, "-c", command], capture_output=True, text=True, env={"PATH": str(bin_dir)},
                         check=True, timeout=30)
    called = {t: (tmp_path / f"{t}.argv").read_text().splitlines() for t in tools if (tmp_path / f"{t}.argv").exists()}
    return out.stdout, called


def test_upgrade_driver_reads_rpm_on_an_rpm_host(tmp_path):
    out, called = _run(_upgrade_command(), tmp_path, {"rpm": R.RPM_RHEL9_550})
    assert called == {"rpm": RPM_ARGS}
    assert U.plan(out, "535.261.03")["refuse"], "the downgrade refusal must see the installed 550.90.07"
    assert U.plan(out, "550.90.07")["action"] == "none"


def test_upgrade_driver_reads_dpkg_on_a_debian_host(tmp_path):
    out, called = _run(_upgrade_command(), tmp_path, {"dpkg-query": R.DPKG_535_261, "rpm": ""})
    assert list(called) == ["dpkg-query"]
    assert called["dpkg-query"] == ["-W", "-f", "${Package} ${Version}\\n", "*nvidia*", "cuda-drivers*"]
    assert U.installed_driver(out) == "535.261.03"


def test_diagnose_reads_the_installed_driver_with_upgrades_reader(tmp_path):
    """One reader: diagnose's driver link judges what upgrade's entry point read (diagnose ran a copy of its own)."""
    assert _role_files_with("dpkg-query -W") == _role_files_with("rpm -qa") == ["roles/upgrade/tasks/installed.yml"]
    packages, called = _run(_upgrade_command(), tmp_path, {"rpm": R.RPM_RHEL9_550}, "/bin/bash")
    assert called == {"rpm": RPM_ARGS}
    loaded = R.PROC_VERSION_PROPRIETARY.replace("535.261.03", "550.90.07")
    evidence = D.driver_versions(loaded, packages, "550.90.07")["evidence"]
    assert evidence == "loaded 550.90.07 = pin 550.90.07; installed 550.90.07"


def _workspace_probe(tmp_path: Path, docker_says: str) -> tuple[int, str]:
    """validate's probe (roles/validate/tasks/workspaces.yml) for member alice, as its loop renders it, with a
    LABELLED stand-in docker that prints ``docker_says`` for `docker ps` and `docker exec` alike."""
    cmd = yaml.safe_load((REPO / "roles/validate/tasks/workspaces.yml").read_text())[0]["ansible.builtin.shell"]["cmd"]
    label = yaml.safe_load((REPO / "roles/_gpuops_vars/vars/main.yml").read_text())["gpuops_workspace_label"]
    cmd = cmd.replace("{{ item.name | quote }}", shlex.quote("alice")).replace("{{ item.name }}", "alice")
    cmd = cmd.replace("{{ gpuops_workspace_label }}", label)
    assert "{{" not in cmd, "the command is run verbatim: no Jinja left in it"
    (tmp_path / "docker").write_text(f"#!/bin/sh\n# LABELLED TEST STAND-IN for docker\nprintf '{docker_says}'\n")
    (tmp_path / "docker").chmod(0o755)
    out = subprocess.run(["/bin/bash", "-c", cmd], capture_output=True, text=True, env={"PATH": f"{tmp_path}:/bin"},
                         check=False, timeout=30)
    return out.returncode, out.stdout


def test_the_one_workspace_probe_names_a_member_without_a_running_workspace(tmp_path):
    """validate's row and diagnose's link judge one probe (diagnose ran a copy of its own that said "cannot run
    nvidia-smi (exit 1)" where validate said "no running workspace for alice")."""
    probes = _role_files_with("docker ps -q --filter label={{ gpuops_workspace_label }}=")
    assert probes == ["roles/validate/tasks/workspaces.yml"]
    rc, out = _workspace_probe(tmp_path, "")
    assert D.workspace_gpus(rc, out, ["GPU-0"])["evidence"] == "no running workspace for alice"
    rc, out = _workspace_probe(tmp_path, "GPU-0\\n")
    assert D.workspace_gpus(rc, out, ["GPU-0"])["status"] == D.OK


def test_the_workspace_label_has_one_home():
    """compose_stack labels each member workspace; health, validate and upgrade find them by it. All four name
    gpuops_workspace_label (_gpuops_vars' vars, which every play imports): a copy of its value would find no
    workspace once the two drift."""
    label = yaml.safe_load((REPO / "roles/_gpuops_vars/vars/main.yml").read_text())["gpuops_workspace_label"]
    files = [p for top in ("roles", "playbooks", "plugins") for p in sorted((REPO / top).rglob("*"))
             if p.suffix in (".yml", ".j2", ".py") and p.is_file()]
    assert [str(p.relative_to(REPO)) for p in files if label in p.read_text()] == ["roles/_gpuops_vars/vars/main.yml"]
    named = {str(p.relative_to(REPO)).split("/")[1] for p in files if "gpuops_workspace_label" in p.read_text()}
    assert {"compose_stack", "health", "validate", "upgrade"} <= named
