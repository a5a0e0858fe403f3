"""pinned_packages module: the re-run fast path (installed packages only), where each closure member stands on the
host (missing, held, moving), the verify mode, and the one-call repository probe (key fetch, fingerprint,
scratch apt-get update) with the scratch directory removed whatever happens.

Real captured inputs (module_utils/fixtures/): debian12-dpkg-status holds the dpkg status stanzas of docker.io,
containerd, runc, tini, jq and libjq1 from a Debian 12 host (jq depends on libjq1 at "= 1.6-2.1+deb12u1");
debian12-apt-get-s-dist-upgrade.txt is `LC_ALL=C apt-get -s dist-upgrade` on that host, cut to seven packages;
debian12-nvidia-535.Packages is the Debian 12 index excerpt the module_utils tests read.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils import pinned_packages as pp
from ansible_collections.gpuops.cluster.plugins.modules import pinned_packages as module
from module_helpers import run_main

FIXTURES = Path(__file__).resolve().parents[1] / "module_utils" / "fixtures"
JQ = "1.6-2.1+deb12u1"
DOCKER = "20.10.24+dfsg1-1+deb12u1+b6"


@pytest.fixture
def status(tmp_path) -> Path:
    path = tmp_path / "status"
    path.write_text((FIXTURES / "debian12-dpkg-status").read_text())
    return path


def hold(path: Path, package: str) -> None:
    """Mark one package held, as `apt-mark hold` writes it into the status file."""
    stanzas = path.read_text().split("\n\n")
    path.write_text("\n\n".join(
        s.replace("Status: install ok installed", "Status: hold ok installed") if s.startswith(f"Package: {package}\n")
        else s for s in stanzas))


def test_installed_only_is_complete_when_the_set_and_its_equal_closure_are_installed(status, capsys):
    code, result = run_main(module, {"installed_only": True, "versions": {"jq": JQ, "docker.io": ""}, "follow": "exact",
                                     "status_file": str(status)}, capsys)
    assert code == 0
    assert result["complete"] is True
    # libjq1 joins through jq's "= version" dependency; docker.io's ">=" ones are the distribution's business.
    assert result["resolved"] == {"jq": JQ, "libjq1": JQ, "docker.io": DOCKER}
    assert (result["missing"], result["moving"], result["held"]) == ([], [], [])


def test_installed_only_is_not_complete_for_another_version_or_a_missing_package(status, capsys):
    for versions in ({"jq": "1.6-2.1+deb12u3"}, {"jq": JQ, "nvidia-driver": "535.261.03"}):
        code, result = run_main(module, {"installed_only": True, "versions": versions, "follow": "exact",
                                         "status_file": str(status)}, capsys)
        assert (code, result["complete"]) == (0, False), versions  # never fails: the caller reads the index then


def test_held_packages_are_reported_so_install_holds_only_the_others(status, capsys):
    hold(status, "jq")
    code, result = run_main(module, {"installed_only": True, "versions": {"jq": JQ}, "follow": "exact",
                                     "status_file": str(status)}, capsys)
    assert (code, result["complete"], result["held"]) == (0, True, ["jq"])


def test_lists_dir_reports_missing_members_and_refuses_a_version_not_offered(status, tmp_path, capsys):
    lists = tmp_path / "lists"
    lists.mkdir()
    shutil.copy(FIXTURES / "debian12-nvidia-535.Packages", lists / "mirror_dists_bookworm_non-free_Packages")
    args = {"lists_dir": str(lists), "versions": {"nvidia-driver": "535.261.03"}, "status_file": str(status)}
    code, result = run_main(module, args, capsys)
    assert code == 0
    assert result["requested"] == {"nvidia-driver": "535.261.03-1"}
    assert len(result["resolved"]) > 1
    assert result["missing"] == sorted(result["resolved"]), "nothing of the driver is installed on that host"
    code, result = run_main(module, {**args, "versions": {"nvidia-driver": "535.300.01"}, "label": "probe"}, capsys)
    assert code == 1
    assert result["msg"].startswith("probe: nvidia-driver 535.300.01 is not offered by this repository; it offers ")
    assert "535.261.03-1" in result["msg"]


def test_lists_dir_refuses_a_downgrade_naming_its_variable_unless_allowed(status, tmp_path, capsys):
    lists = tmp_path / "lists"
    lists.mkdir()
    index = (FIXTURES / "debian12-nvidia-535.Packages").read_text()
    (lists / "mirror_dists_bookworm_non-free_Packages").write_text(index)
    # The host has the newer driver of that index installed: its own stanza, marked installed as dpkg writes it.
    newer = next(s for s in index.split("\n\n") if s.startswith("Package: nvidia-driver\n") and "535.309.01" in s)
    status.write_text(status.read_text().rstrip("\n") + "\n\n" + newer.strip("\n") + "\nStatus: install ok installed\n")
    args = {"lists_dir": str(lists), "versions": {"nvidia-driver": "535.261.03"}, "status_file": str(status),
            "downgrade_variable": "driver_allow_downgrade", "label": "probe", "fix": "pin a newer driver"}
    code, result = run_main(module, args, capsys)
    assert code == 1
    assert result["msg"] == (
        "probe: the set would downgrade nvidia-driver 535.309.01-0+deb12u1 -> 535.261.03-1; set "
        "driver_allow_downgrade=true to allow it, or pin versions at least as new as the installed ones. Fix: pin a "
        "newer driver"
    )
    code, result = run_main(module, {**args, "allow_downgrade": True}, capsys)
    assert (code, result["moving"]) == (0, ["nvidia-driver"])


def test_the_lazy_index_resolves_like_the_full_one():
    text = (FIXTURES / "debian12-nvidia-535.Packages").read_text()
    full = pp.build_index(pp.parse_stanzas(text))
    lazy = pp.LazyIndex([text])
    for versions in ({"nvidia-driver": "535.261.03"}, {"nvidia-kernel-dkms": "535.309.01"}, {"nvidia-smi": ""}):
        assert pp.resolve(lazy, versions) == pp.resolve(full, versions), versions
    assert all(lazy.get(name) == offers for name, offers in full.items())


@pytest.fixture
def simulated(monkeypatch):
    """apt-get -s as captured on the Debian 12 host (both simulations see the same upgrades there)."""
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(argv)
        return 0, (FIXTURES / "debian12-apt-get-s-dist-upgrade.txt").read_text(), ""

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    return calls


def test_verify_names_wrong_unheld_and_moved_packages(status, simulated, capsys):
    hold(status, "jq")
    want = {"jq": JQ, "libjq1": JQ, "docker.io": DOCKER, "tini": "0.19.0-1"}
    code, result = run_main(module, {"verify": want, "status_file": str(status)}, capsys)
    assert code == 0
    assert result["wrong"] == ["tini=0.19.0-1"]  # installed: 0.19.0-1+b3
    assert result["unheld"] == ["docker.io", "libjq1", "tini"]
    assert result["held"] == ["jq"]
    assert result["moved"] == ["jq", "libjq1"]  # the security update the simulation would install
    assert [a[-1] for a in simulated] == ["upgrade", "dist-upgrade"]
    assert all("Debug::NoLocking=1" in a for a in simulated), "verify must not take apt's lock"
    code, result = run_main(module, {"verify": want, "hold": False, "status_file": str(status)}, capsys)
    assert result["unheld"] == []


@pytest.fixture
def key_server():
    """A local HTTP server over the fixtures folder (the throwaway key, and nothing that looks like a repository)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(FIXTURES))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    """Where the module's scratch directory goes, to prove it is removed again."""
    path = tmp_path / "scratch"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def repo_args(url: str, status: Path, **extra) -> dict:
    return {"repo_url": f"{url}/no-repository-here", "suites": ["bookworm"], "components": ["main"],
            "key_url": f"{url}/throwaway-ed25519.asc",
            "key_fingerprint": (FIXTURES / "throwaway-ed25519.fpr").read_text().split()[0],
            "versions": {"jq": JQ}, "status_file": str(status), "label": "_pinned_packages 'x' (repo)", **extra}


def test_repository_probe_refuses_a_key_it_cannot_fetch(key_server, status, scratch, capsys):
    code, result = run_main(module, repo_args(key_server, status, key_url=f"{key_server}/missing.asc"), capsys)
    assert code == 1
    assert result["msg"].startswith(
        f"_pinned_packages 'x' (repo): could not fetch the signing key {key_server}/missing.asc")
    assert "HTTP 404" in result["msg"]
    assert not list(scratch.glob("gpuops-pin.*"))


def test_repository_probe_reads_a_key_from_a_file_url(key_server, status, scratch, capsys):
    wrong = "0123456789ABCDEF0123456789ABCDEF01234567"
    key = FIXTURES / "throwaway-ed25519.asc"
    code, result = run_main(module, repo_args(key_server, status, key_url=f"file://{key}", key_fingerprint=wrong),
                            capsys)
    assert code == 1
    assert "the repository key has fingerprint" in result["msg"], "the file:// key was read, then judged"


def test_repository_probe_refuses_another_key_by_its_fingerprint(key_server, status, scratch, capsys):
    wrong = "0123456789ABCDEF0123456789ABCDEF01234567"
    code, result = run_main(module, repo_args(key_server, status, key_fingerprint=wrong), capsys)
    assert code == 1
    expected = (FIXTURES / "throwaway-ed25519.fpr").read_text().split()[0]
    assert f"the repository key has fingerprint {expected} (key {key_server}/throwaway-ed25519.asc); " \
           f"expected {wrong}" in result["msg"]
    assert not list(scratch.glob("gpuops-pin.*"))


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get (a Debian host): the scratch apt-get update")
def test_repository_probe_runs_a_scratch_apt_update_and_reports_its_refusal(
        key_server, status, scratch, tmp_path, capsys):
    keyring = tmp_path / "x.gpg"
    keyring.write_bytes(pp.dearmor((FIXTURES / "throwaway-ed25519.asc").read_bytes()))
    code, result = run_main(module, repo_args(key_server, status, keyring=str(keyring)), capsys)
    assert code == 1
    assert result["msg"].startswith(f"_pinned_packages 'x' (repo): apt refused {key_server}/no-repository-here "
                                    "(suites bookworm) with the key from ")
    assert "404" in result["msg"], "apt's own reason is quoted"
    assert result["keyring_current"] is True
    assert not list(scratch.glob("gpuops-pin.*")), "the scratch directory is removed on failure too"
    keyring.write_bytes(b"another key")
    code, result = run_main(module, repo_args(key_server, status, keyring=str(keyring)), capsys)
    assert result["keyring_current"] is False


def test_key_dest_writes_the_checked_key_binary_for_apt_and_as_served_for_dnf(key_server, tmp_path, capsys):
    """The one key path of both managers (the role's keyring.yml): fetched, fingerprint checked, then written."""
    served = (FIXTURES / "throwaway-ed25519.asc").read_bytes()
    args = {"key_url": f"{key_server}/throwaway-ed25519.asc",
            "key_fingerprint": (FIXTURES / "throwaway-ed25519.fpr").read_text().split()[0]}
    for manager, expected in (("apt", pp.dearmor(served)), ("dnf", served)):
        dest = tmp_path / f"key.{manager}"
        code, result = run_main(module, {**args, "manager": manager, "key_dest": str(dest)}, capsys)
        assert code == 0, result
        assert dest.read_bytes() == expected
    assert pp.dearmor(served) != served, "the fixture is armored, so the two forms differ"
    wrong = tmp_path / "key.wrong"
    code, result = run_main(module, {**args, "key_fingerprint": "01" * 20, "key_dest": str(wrong)}, capsys)
    assert code == 1
    assert "the repository key has fingerprint" in result["msg"]
    assert not wrong.exists(), "a key that fails its check is not written"


# The two files install writes: the probe renders them and says whether the host holds them already (a re-run
# then writes and stats neither). apt itself reads the rendered text here, in a scratch configuration.

def apt_scratch(tmp_path: Path, status: Path) -> list[str]:
    """apt options for a configuration that reads only the given status file and the scratch parts."""
    for sub in ("lists/partial", "cache/archives/partial", "parts", "prefs"):
        (tmp_path / "apt" / sub).mkdir(parents=True, exist_ok=True)
    d = tmp_path / "apt"
    opts = {"Dir::State::status": status, "Dir::State::Lists": d / "lists", "Dir::Etc::SourceList": "/dev/null",
            "Dir::Etc::SourceParts": d / "parts", "Dir::Etc::Preferences": "/dev/null",
            "Dir::Etc::PreferencesParts": d / "prefs", "Dir::Cache": d / "cache", "Dir::Cache::pkgcache": "",
            "Dir::Cache::srcpkgcache": ""}
    return [a for k, v in opts.items() for a in ("-o", f"{k}={v}")]


@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="needs apt-cache (a Debian host) to read the pin file")
def test_the_pin_file_pins_every_closure_member_at_1001_for_apt_and_is_current_once_written(status, tmp_path, capsys):
    pin = tmp_path / "apt" / "prefs" / "jq.pref"
    args = {"installed_only": True, "versions": {"jq": JQ}, "follow": "exact", "status_file": str(status),
            "set_name": "jq", "pin_file": str(pin)}
    code, result = run_main(module, args, capsys)
    assert (code, result["pin_current"]) == (0, False), "absent: to be written"
    scratch = apt_scratch(tmp_path, status)
    pin.write_text(result["pin_content"])
    pin.chmod(0o644)
    policy = subprocess.run(["apt-cache", *scratch, "policy", "jq", "libjq1", "tini"], capture_output=True, text=True,
                            env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"}, check=True).stdout
    # apt's version table: "*** <installed version> <priority>"; libjq1 joined the closure through jq.
    assert re.findall(r"^(\S+):\n(?:.*\n)*? \*\*\* (\S+) (\d+)$", policy, re.M) == [
        ("jq", JQ, "1001"), ("libjq1", JQ, "1001"), ("tini", "0.19.0-1+b3", "100")]
    assert run_main(module, args, capsys)[1]["pin_current"] is True
    pin.chmod(0o664)
    assert run_main(module, args, capsys)[1]["pin_current"] is False, "another mode: written again"
    pin.chmod(0o644)
    pin.write_text(result["pin_content"].replace("1001", "990"))
    assert run_main(module, args, capsys)[1]["pin_current"] is False, "edited by hand: written again"


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get (a Debian host) to read the sources file")
def test_the_sources_file_is_deb822_apt_reads_signed_by_the_keyring_only(status, tmp_path):
    url = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
    text = pp.deb822_source("nvidia-driver", url, ["/"], [], ["amd64"], "/etc/apt/keyrings/nvidia-driver.gpg",
                            "EB693B3035CD5710E231E123A4B469963BF863CC")
    assert "\nSigned-By: /etc/apt/keyrings/nvidia-driver.gpg\n" in text
    assert "signed by EB693B3035CD5710E231E123A4B469963BF863CC only" in text
    scratch = apt_scratch(tmp_path, status)
    (tmp_path / "apt" / "parts" / "nvidia-driver.sources").write_text(text)
    uris = subprocess.run(["apt-get", *scratch, "update", "--print-uris"], capture_output=True, text=True,
                          env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"}, check=True).stdout
    # A flat repository ("/" suite): apt fetches InRelease and Packages from the URL itself.
    assert [line.split()[0].strip("'") for line in uris.splitlines()] == [f"{url}InRelease", f"{url}Packages.xz"]


@pytest.mark.parametrize("missing", ["key_url", "key_fingerprint", "suites"])
def test_a_repository_without_its_key_or_apt_suites_is_refused_before_anything_is_read(missing, capsys):
    """The one check of a repository's settings (_pinned_packages' common.yml leaves it to the probe)."""
    args = {"repo_url": "http://127.0.0.1:9/", "key_url": "http://127.0.0.1:9/key", "key_fingerprint": "01" * 20,
            "suites": ["/"], "versions": {"jq": JQ}, "label": "probe"}
    code, result = run_main(module, {**args, missing: [] if missing == "suites" else None}, capsys)
    assert code == 1
    assert result["msg"].startswith("probe: repo_url needs key_url, key_fingerprint and (apt) suites"), result["msg"]
    assert "Fix: give the repository's key URL" in result["msg"]
