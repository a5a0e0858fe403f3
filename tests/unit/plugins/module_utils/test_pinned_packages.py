"""pinned_packages: Debian version order, offered-version checks, the dependency closure and its refusals.

The closure cases read real Debian 12 index stanzas (fixtures/debian12-nvidia-535.Packages: every binary of
nvidia-graphics-drivers 535.261.03-1 and 535.309.01-0+deb12u1 and the non-free packages they depend on,
captured from deb.debian.org). The NVIDIA-repository structure (metapackages at "= version") is in
molecule/driver/files/nvidia-repo-structure.yml, read here as well so the stand-in mirror and these tests agree.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpuops.cluster.plugins.module_utils import pinned_packages as pp
from ansible_collections.gpuops.cluster.plugins.module_utils import pinned_packages_dnf as ppd

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = Path(__file__).resolve().parents[4]
OLD, NEW = "535.261.03-1", "535.309.01-0+deb12u1"
BUILDER = REPO / "molecule/driver/files/build-standin-nvidia.py"


@pytest.fixture(scope="module")
def debian_index():
    return pp.build_index(pp.parse_stanzas((FIXTURES / "debian12-nvidia-535.Packages").read_text()))


# --- versions -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "sign"),
    [
        ("535.261.03-1", "535.309.01-0+deb12u1", -1),
        ("1.0~rc1", "1.0", -1),
        ("1:0.1", "9.9", 1),
        ("1.0-1", "1.0-1", 0),
        ("1.0", "1.0-0", 0),
        ("2.0a", "2.0+", -1),
        ("1.31.2-1.1", "1.31.10-1.1", -1),
        ("5:28.3.3-1~debian.12~bookworm", "5:28.3.3-1~debian.12~bookworm", 0),
        ("570.86.15-1", "570.86.16-1", -1),
        ("1.0.0", "1.0", 1),
    ],
)
def test_compare_versions_follows_dpkg(a, b, sign):
    result = pp.compare_versions(a, b)
    assert (result > 0) - (result < 0) == sign
    back = pp.compare_versions(b, a)
    assert (back > 0) - (back < 0) == -sign


def test_request_matching_bare_upstream_or_exact():
    assert pp.matches_request("570.86.15-1", "570.86.15")
    assert pp.matches_request("1:570.86.15-0ubuntu1", "570.86.15")
    assert not pp.matches_request("570.86.150-1", "570.86.15")
    assert pp.matches_request("1.31.2-1.1", "1.31.2-1.1")
    assert not pp.matches_request("1.31.2-1.2", "1.31.2-1.1")


def test_parse_depends_alternatives_arch_and_relations():
    groups = pp.parse_depends("a (>= 1.0), b:any (= 2) | c [amd64], d (<< 3~)")
    assert groups == [[("a", ">=", "1.0")], [("b", "=", "2"), ("c", "", "")], [("d", "<<", "3~")]]


def test_read_index_plain_and_gzip(tmp_path):
    text = "Package: x\nVersion: 1\n\nPackage: y\nVersion: 2\nDepends: x\n"
    (tmp_path / "a_Packages").write_text(text)
    with gzip.open(tmp_path / "b_Packages.gz", "wt") as handle:
        handle.write(text)
    for name in ("a_Packages", "b_Packages.gz"):
        assert [s["Package"] for s in pp.parse_stanzas(pp.read_index(str(tmp_path / name)))] == ["x", "y"]


# --- closure on Debian's real 535 stanzas ---------------------------------------------------------------


def test_real_debian_index_offers_both_versions(debian_index):
    assert pp.offered_versions(debian_index, "nvidia-kernel-dkms") == [NEW, OLD]


def test_closure_of_one_package_pins_every_equal_version_dependency(debian_index):
    out = pp.resolve(debian_index, {"nvidia-kernel-dkms": "535.261.03"})
    assert out["errors"] == []
    resolved = out["resolved"]
    assert resolved["nvidia-kernel-dkms"] == OLD
    # nvidia-kernel-dkms depends on nvidia-kernel-support (= version) and firmware-nvidia-gsp (= version):
    # both are in the closure at the old version, not at the newer one the index also offers.
    for member in ("nvidia-kernel-support", "firmware-nvidia-gsp"):
        assert resolved[member] == OLD, (member, out["closure_reasons"].get(member))
    # Every binary of source nvidia-graphics-drivers in the closure is at the old version; nvidia-modprobe
    # (its own source, ">= 535") takes the newest, and is pinned and held like the rest.
    source = {n: offers[0].get("Source", "").split(" ")[0] for n, offers in debian_index.items()}
    driver = {n: v for n, v in resolved.items() if source.get(n) == "nvidia-graphics-drivers"}
    assert {"nvidia-kernel-dkms", "nvidia-kernel-support", "nvidia-alternative", "nvidia-legacy-check"} <= set(driver)
    assert set(driver.values()) == {OLD}
    assert "nvidia-modprobe" in resolved


def test_headless_set_of_the_role_resolves_to_one_version(debian_index):
    role_vars = yaml.safe_load((REPO / "roles/nvidia_driver/vars/Debian.yml").read_text())
    packages = role_vars["_nvidia_driver_sources"]["distro"]["packages"]["proprietary"]
    out = pp.resolve(debian_index, dict.fromkeys(packages, "535.309.01"))
    assert out["errors"] == []
    driver = {n: v for n, v in out["resolved"].items() if v in (OLD, NEW)}
    assert set(driver.values()) == {NEW}
    assert set(packages) <= set(out["resolved"])


def test_requested_member_at_another_version_is_refused(debian_index):
    out = pp.resolve(debian_index, {"nvidia-smi": "535.309.01", "libnvidia-ml1": "535.261.03"})
    assert any(e.startswith("libnvidia-ml1 is requested at 535.261.03") and f"(= {NEW})" in e for e in out["errors"])
    # nvidia-kernel-dkms depends on the unversioned virtual nvidia-kernel-support--v1: any version satisfies
    # it, so an older nvidia-kernel-support next to a newer module is what apt allows, and no refusal.
    loose = pp.resolve(debian_index, {"nvidia-kernel-dkms": "535.309.01", "nvidia-kernel-support": "535.261.03"})
    assert loose["errors"] == []


def test_missing_version_lists_the_offered_ones(debian_index):
    out = pp.resolve(debian_index, {"nvidia-smi": "535.300.01"})
    assert out["errors"] == [f"nvidia-smi 535.300.01 is not offered by this repository; it offers {NEW}, {OLD}"]


def test_equal_dependency_the_index_lacks_is_refused(debian_index):
    # Drop firmware-nvidia-gsp 535.261.03-1 from the index: the old kernel package cannot be pinned consistently.
    index = {n: list(v) for n, v in debian_index.items()}
    index["firmware-nvidia-gsp"] = [s for s in index["firmware-nvidia-gsp"] if s["Version"] != OLD]
    out = pp.resolve(index, {"nvidia-kernel-dkms": "535.261.03"})
    assert any(e.startswith("firmware-nvidia-gsp cannot be pinned to a matching version") for e in out["errors"])


def test_follow_exact_keeps_only_equal_dependencies(debian_index):
    everything = pp.resolve(debian_index, {"nvidia-smi": "535.261.03"})["resolved"]
    exact = pp.resolve(debian_index, {"nvidia-smi": "535.261.03"}, follow="exact")["resolved"]
    assert set(exact) < set(everything)
    assert all(v == OLD for v in exact.values())


def test_unconstrained_member_same_version_else_installed_else_newest():
    stanzas = pp.parse_stanzas(
        "Package: top\nVersion: 2.0-1\nDepends: lib (>= 1.0), tool\n\n"
        "Package: lib\nVersion: 2.0-1\n\nPackage: lib\nVersion: 2.1-1\n\n"
        "Package: tool\nVersion: 0.9-1\n\nPackage: tool\nVersion: 0.8-1\n"
    )
    index = pp.build_index(stanzas)
    fresh = pp.resolve(index, {"top": "2.0"})["resolved"]
    assert fresh == {"top": "2.0-1", "lib": "2.0-1", "tool": "0.9-1"}  # lib: the parent's version; tool: newest
    kept = pp.resolve(index, {"top": "2.0"}, installed={"tool": "0.8-1", "lib": "2.1-1"})["resolved"]
    assert kept == {"top": "2.0-1", "lib": "2.0-1", "tool": "0.8-1"}


def test_virtual_dependency_follows_the_provider_at_the_same_version(debian_index):
    # nvidia-kernel-dkms depends on "nvidia-kernel-support--v1" (a virtual both driver versions provide).
    out = pp.resolve(debian_index, {"nvidia-kernel-dkms": "535.261.03"})
    assert out["resolved"]["nvidia-kernel-support"] == OLD
    assert any("nvidia-kernel-support--v1" in why for why in out["closure_reasons"]["nvidia-kernel-support"])


def test_downgrade_is_reported():
    assert pp.downgrades({"a": "1.0-1", "b": "2.0-1"}, {"a": "1.1-1", "b": "2.0-1"}) == {"a": ("1.1-1", "1.0-1")}


def test_downgrade_refusal_names_each_move_and_the_variable_in_either_version_form():
    assert pp.downgrade_refusal({}, "x_allow") == ""
    down = pp.downgrades({"b": "1:1.0-1", "a": "1.0-1"}, {"a": "1.1-1", "b": "1:1.0-2"})
    assert pp.downgrade_refusal(down, "x_allow") == (
        "the set would downgrade a 1.1-1 -> 1.0-1, b 1:1.0-2 -> 1:1.0-1; set x_allow=true to allow it, or pin "
        "versions at least as new as the installed ones"
    )
    # dnf: EVR tuples, rpm's order injected (here: tuple order, which agrees for these), shown as V-R / E:V-R.
    rpm_down = pp.downgrades({"a": ("0", "1.0", "1")}, {"a": ("2", "0.9", "1")}, lambda x, y: (x > y) - (x < y))
    assert pp.downgrade_refusal(rpm_down, "v", ppd.evr_string).startswith("the set would downgrade a 2:0.9-1 -> 1.0-1;")


def test_standing_says_what_is_installed_what_moves_and_what_is_missing():
    state = pp.standing({"a": "1-1", "b": "2-1", "c": "3-1"}, {"a": "1-1", "b": "1-1", "z": "9-1"})
    assert state == {"installed": {"a": "1-1", "b": "1-1"}, "moving": ["b"], "missing": ["b", "c"]}


# --- the NVIDIA repository structure the stand-in mirror copies -----------------------------------------


def _builder():
    """molecule/driver/files/build-standin-nvidia.py: its stanza() makes the stand-ins' control fields."""
    spec = importlib.util.spec_from_file_location("build_standin_nvidia", BUILDER)
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    return builder


def _structure_index():
    """The index the stand-in mirror serves: every stand-in's control fields, as the builder writes them."""
    structure = yaml.safe_load((REPO / "molecule/driver/files/nvidia-repo-structure.yml").read_text())
    stanza = _builder().stanza
    branch = structure["driver_branch"]
    stanzas = [
        stanza(pkg, branch, version)
        for kind, versions in (("packages", structure["driver_versions"]), ("toolkit", structure["toolkit_versions"]))
        for pkg in structure[kind]
        for version in pkg.get("versions", versions)
    ]
    stanzas += [stanza(pkg, branch, version, structure["dcgm_epoch"])
                for pkg in structure["dcgm"] for version in structure["dcgm_versions"]]
    return structure, pp.build_index(stanzas)


@pytest.mark.parametrize("flavour", ["open", "proprietary"])
def test_nvidia_structure_metapackage_closure_is_one_version(flavour):
    structure, index = _structure_index()
    old, new = structure["driver_versions"]
    out = pp.resolve(index, dict.fromkeys(structure["flavours"][flavour], old))
    assert out["errors"] == []
    assert set(out["resolved"].values()) == {old + "-1"}, out["resolved"]  # nvidia-modprobe (>= 570) too
    assert {"nvidia-smi", "nvidia-modprobe", "libcuda1", "nvidia-persistenced", "firmware-nvidia-gsp"} <= set(
        out["resolved"]
    )
    other = "nvidia-kernel-dkms" if flavour == "open" else "nvidia-kernel-open-dkms"
    assert other not in out["resolved"]
    # apt alone would take the newest version of every "= version" member it is not told about; the
    # closure pins each of them, so nothing is left for apt to choose.
    assert new + "-1" in pp.offered_versions(index, "nvidia-smi")


def test_nvidia_structure_fabric_manager_one_patch_off_is_refused():
    structure, index = _structure_index()
    old, new = structure["driver_versions"]
    # Fabric Manager is offered at the old driver version and one patch behind the new one.
    assert pp.resolve(index, {"cuda-drivers-fabricmanager-570": old})["errors"] == []
    alone = pp.resolve(index, {"nvidia-fabricmanager-570": new})
    assert alone["errors"] == [
        f"nvidia-fabricmanager-570 {new} is not offered by this repository; it offers 570.195.02-1, {old}-1"
    ]
    meta = pp.resolve(index, {"cuda-drivers-fabricmanager-570": new})
    assert any(e.startswith("nvidia-fabricmanager-570 cannot be pinned to a matching version") for e in meta["errors"])


def test_toolkit_members_without_equal_dependency_take_the_requested_versions():
    structure, index = _structure_index()
    old = structure["toolkit_versions"][0]
    names = [p["name"] for p in structure["toolkit"]]
    alone = pp.resolve(index, {"nvidia-container-toolkit": old})
    # Only the top package named: the ">=" members take its version (not the newest offered).
    assert set(alone["resolved"].values()) == {old + "-1"}
    together = pp.resolve(index, dict.fromkeys(names, old))
    assert together["errors"] == []
    assert set(together["resolved"].values()) == {old + "-1"}
    assert set(together["resolved"]) == set(names)  # python3 and runc (the stand-ins' own needs) are not offered


def test_toolkit_118_ties_its_tools_to_its_own_version():
    # From 1.18 nvidia-container-toolkit depends on libnvidia-container-tools at "=" its version ([S4]).
    structure, index = _structure_index()
    old, new = structure["toolkit_versions"]
    assert pp.resolve(index, dict.fromkeys([p["name"] for p in structure["toolkit"]], new))["errors"] == []
    mixed = pp.resolve(index, {"nvidia-container-toolkit": new, "libnvidia-container-tools": old})
    assert mixed["errors"] == [
        f"libnvidia-container-tools is requested at {old} ({old}-1) but nvidia-container-toolkit {new}-1 depends on "
        f"libnvidia-container-tools (= {new}-1); nvidia-container-toolkit {new}-1 depends on libnvidia-container-tools "
        f"(<< 2.0.0): the set cannot be pinned consistently. Pin libnvidia-container-tools to a version that satisfies "
        f"it (offered: {new}-1)"
    ]


@pytest.mark.parametrize("follow", ["all", "exact"])
def test_dcgm_bare_version_pins_the_epoch_versioned_set(follow):
    """gpu_health's default DCGM set (roles/gpu_health/vars/main.yml, CUDA 12) at its bare default version (4.6.0)
    resolves to NVIDIA's epoch-versioned packages (1:4.6.0-1), every one, with a newer version offered beside it;
    "exact" is the closure of gpu_health_dcgm_source: configured (the host's own repositories)."""
    structure, index = _structure_index()
    role_vars = yaml.safe_load((REPO / "roles/gpu_health/vars/main.yml").read_text())
    names = [n.replace("{{ _gpu_health_dcgm_cuda_major }}", "12")
             for n in role_vars["_gpu_health_dcgm_default_packages"]]
    default = yaml.safe_load((REPO / "roles/gpu_health/defaults/main.yml").read_text())["gpu_health_dcgm_version"]
    pin, newer = structure["dcgm_versions"]
    assert default == pin, "the stand-ins offer gpu_health's default version and a newer one"
    assert set(names) == {p["name"] for p in structure["dcgm"]}
    out = pp.resolve(index, dict.fromkeys(names, default), follow=follow)
    assert out["errors"] == []
    assert out["resolved"] == dict.fromkeys(names, f"1:{pin}-1")
    assert f"1:{newer}-1" in pp.offered_versions(index, "datacenter-gpu-manager-4-core")
    mixed = pp.resolve(index, {"datacenter-gpu-manager-4-cuda12": pin, "datacenter-gpu-manager-4-core": newer})
    assert mixed["errors"], "core at another version than cuda12 cannot be pinned together"


# --- key fingerprints -----------------------------------------------------------------------------------


def test_fingerprint_matches_what_gpg_printed():
    # fixtures/throwaway-ed25519.asc: a throwaway key made with gpg --quick-gen-key for this test; .fpr is the
    # fingerprint gpg --with-colons printed for it.
    key = (FIXTURES / "throwaway-ed25519.asc").read_bytes()
    expected = (FIXTURES / "throwaway-ed25519.fpr").read_text().split()
    assert pp.key_fingerprints(key)["primary"] == expected[:1]
    assert pp.key_fingerprints(pp.dearmor(key))["primary"] == expected[:1]


def test_fingerprint_of_a_hand_built_v4_packet():
    body = bytes([4, 0, 0, 0, 0, 22, 0, 8, 0xAA])  # version 4, time 0, EdDSA, a one-byte MPI
    packet = bytes([0x98, len(body)]) + body  # old-format header, tag 6, one-octet length
    expected = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    assert pp.key_fingerprints(packet) == {"primary": [expected], "subkeys": []}
    armored = "\n".join(
        [
            "-----BEGIN PGP PUBLIC KEY BLOCK-----",
            "",
            base64.b64encode(packet).decode(),
            "-----END PGP PUBLIC KEY BLOCK-----",
        ]
    )
    assert pp.dearmor(armored.encode()) == packet


def test_not_a_key_is_refused():
    with pytest.raises(ValueError, match="not an OpenPGP key"):
        pp.key_fingerprints(b"<html>404</html>")


def test_fingerprint_normalisation():
    assert pp.normalize_fingerprint("9DC8 5822 9fc7:DD38") == "9DC858229FC7DD38"


def test_empty_version_is_installed_else_newest(debian_index):
    offers = pp.offered_versions(debian_index, "nvidia-smi")
    assert pp.resolve(debian_index, {"nvidia-smi": ""})["requested"] == {"nvidia-smi": offers[0]}
    kept = pp.resolve(debian_index, {"nvidia-smi": ""}, installed={"nvidia-smi": offers[-1]})
    assert kept["requested"] == {"nvidia-smi": offers[-1]}
