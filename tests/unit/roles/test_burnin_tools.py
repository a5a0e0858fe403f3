"""burnin's tools stage (roles/burnin/tasks/tools.yml) run for real on the controller: what it fetches, the commands
it builds with, the stamp that makes a second burn-in build nothing (changed=0), and the refusal without nvcc.

Real, where the local mirrors are (else labelled stand-in releases of the same layout, REAL_SOURCES): nccl-tests
2.19.6's and nvbandwidth v0.8's source releases (``git archive`` of their tags from the local
mirrors of github.com/NVIDIA/nccl-tests and github.com/NVIDIA/nvbandwidth, served as file:// URLs with their
sha256, as a site's mirror would be), nccl-tests' own Makefile run by this machine's make and g++, ansible's
get_url, unarchive and command. Stand-ins, each labelled in its text, for what this machine has not (no GPU, no
CUDA toolkit): ``nvidia-smi`` (the compute_cap query's answer for two H200s, 9.0), ``nvcc`` (nvcc 13.0's
``--version`` text; a compile writes its ``-o`` file), ``cmake`` (nvbandwidth's CUDA project cannot be configured
without a real nvcc: it records its argv and writes a Makefile that makes ``nvbandwidth``), and the NCCL wheel
(nvidia-nccl-cu13's layout: nvidia/nccl/include/nccl.h with NCCL 2.28.9's version defines, lib/libnccl.so.2).
Every stand-in records its argv: those are what our code controls.

The default sources (NVIDIA's GitHub archives, fetched without a checksum) are checked against the pins of the role's
vars (_burnin_source_pins: the sha256 of the tar inside the .tar.gz) before anything of them is unpacked:
the pins are the tags of the local mirrors, and the same tar gzipped as GitHub does has the sha256 Spack records for
GitHub's archive (SPACK below); a file served under a pinned release's name that is another release is refused. The
same for the one nccl-tests release (burnin_nccl_tests_url) that the pairs' image on Compose and validate's
all_reduce_perf unpack (nccl_tests_source.yml; docker a stand-in that records its argv); roles/ and playbooks/ name
no other nccl-tests release or source.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from ansible_env import NO_PROFILE_TASKS, json_document, playbook_env
from ci_skips import skip_by_design
from conftest import shared_path

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "tests" / "unit" / "roles" / "playbooks" / "burnin_tools.yml"
BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
# Local mirrors of the GitHub repositories (bare git directories), beside the checkout as ../shared/data is, or
# where GPUOPS_SOURCE_MIRRORS says (a worktree elsewhere).
MIRROR = Path(os.environ.get("GPUOPS_SOURCE_MIRRORS", REPO.parent / ".mirror"))
MIRRORS = {
    "nccl-tests": (MIRROR / "NVIDIA+nccl-tests" / "repo", "v2.19.6"),
    "nvbandwidth": (MIRROR / "NVIDIA+nvbandwidth" / "repo", "v0.8"),
}
# Without the mirrors (CI's clean machine cannot reach GitHub), labelled stand-in source releases with the same
# layout: nccl-tests' make variables and output, nvbandwidth's CMake project. The real sources add what only they
# prove: nccl-tests' own Makefile compiling every collective for sm_90 against the wheel's NCCL.
REAL_SOURCES = all(mirror.is_dir() for mirror, _tag in MIRRORS.values())
PINS = yaml.safe_load((REPO / "roles" / "burnin" / "vars" / "main.yml").read_text())["_burnin_source_pins"]
# The sha256 of GitHub's archive (https://github.com/NVIDIA/<tool>/archive/[refs/tags/]<tag>.tar.gz) as Spack records
# it, by tool and tag: github.com/spack/spack-packages, repos/spack_repo/builtin/packages/nvbandwidth/package.py at
# 7084fd29926ed9c985d00fdabdf83a72a28758f5 (v0.8, the release pinned here) and .../nccl_tests/package.py at
# d9bc1530527a714b4146dfe5849bbda448d8bcdf (2.17.6, 2.16.3, 2.13.6: Spack records no 2.19.6; they show that the same
# recipe - git archive of the tag, gzip -n - is GitHub's archive of this repository too).
SPACK = {
    ("nvbandwidth", "v0.8"): "b3622945eb7fce2b4e1aea7d13de04f415f4d998db602893201a904320cf2d39",
    ("nccl-tests", "v2.17.6"): "38974e70342150ede0e3fb8fd24bfe60ccbde90fa20241716ba8bb338e6b61a0",
    ("nccl-tests", "v2.16.3"): "ec373552e216c0df03414718bd588585a1719971b20a5939a2f9488c8ce767eb",
    ("nccl-tests", "v2.13.6"): "52b472a58a4918d3221a9b8c4bd9335382643d7e241983918b64692d685cc3d1",
}
NCCL_TESTS_MAKEFILE = """# STAND-IN for nccl-tests 2.19.6's Makefile (no local mirror of NVIDIA/nccl-tests):
# the variables burn-in passes (MPI, CUDA_HOME, NCCL_HOME, NVCC_GENCODE), nvcc from CUDA_HOME, and the binary
# build/all_reduce_perf.
NVCC = $(CUDA_HOME)/bin/nvcc
all:
\t$(NVCC) $(NVCC_GENCODE) -I$(NCCL_HOME)/include/ -c src/all_reduce.cu -o $(CURDIR)/build/all_reduce.o
\t$(NVCC) -o $(CURDIR)/build/all_reduce_perf $(CURDIR)/build/all_reduce.o -L$(NCCL_HOME)/lib -lnccl
"""
STANDIN_SOURCES = {
    "nccl-tests": {"Makefile": NCCL_TESTS_MAKEFILE, "src/all_reduce.cu": "// STAND-IN source\n"},
    "nvbandwidth": {"CMakeLists.txt": "# STAND-IN for nvbandwidth v0.8's CMake project\n"},
}
GENCODE = "-gencode=arch=compute_90,code=sm_90"
PLAN = "Burn-in | tools - what this node runs, and what to build"

NVCC = """#!/bin/sh
# STAND-IN for NVIDIA's nvcc (no CUDA toolkit on this machine): nvcc 13.0's --version text; a compile or link
# writes its -o file. Records its argv.
echo "nvcc $*" >> "$STANDIN_LOG"
if [ "$1" = --version ]; then
  printf 'nvcc: NVIDIA (R) Cuda compiler driver\\nCopyright (c) 2005-2025 NVIDIA Corporation\\n'
  printf 'Built on Wed_Jul_16_07:30:01_PM_PDT_2025\\nCuda compilation tools, release 13.0, V13.0.48\\n'
  printf 'Build cuda_13.0.r13.0/compiler.36260728_0\\n'
  exit 0
fi
out=
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
[ -z "$out" ] || { mkdir -p "$(dirname "$out")"; printf '#!/bin/sh\\necho stand-in\\n' > "$out"; chmod +x "$out"; }
"""
NVIDIA_SMI = """#!/bin/sh
# STAND-IN for nvidia-smi (no GPU here): --query-gpu=compute_cap --format=csv,noheader of two H200s.
echo "nvidia-smi $*" >> "$STANDIN_LOG"
printf '9.0\\n9.0\\n'
"""
CMAKE = """#!/bin/sh
# STAND-IN for cmake (nvbandwidth's CUDA project needs a real nvcc to configure): records its argv and writes the
# build folder's Makefile, whose target is the nvbandwidth binary.
echo "cmake $*" >> "$STANDIN_LOG"
while [ $# -gt 0 ]; do [ "$1" = -B ] && build=$2; shift; done
mkdir -p "$build"
printf 'nvbandwidth:\\n\\tprintf "#!/bin/sh\\\\necho stand-in\\\\n" > $@ && chmod +x $@\\n' > "$build/Makefile"
"""


# The GPU count, as gpu_facts gives it (an extra variable: the facts of every case host).
FACTS = {"ansible_facts": {"gpu": {"count": 2}}}


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The stand-ins, the sources as a mirror serves them, and the variables of the runs."""
    if not (BIN / "ansible-playbook").exists():
        pytest.skip(f"ansible-playbook not found in {BIN} (run make venv)")
    root = tmp_path_factory.mktemp("burnin_tools")
    (root / "bin").mkdir()
    (root / "cuda-13.0" / "bin").mkdir(parents=True)
    for path, text in (
        (root / "cuda-13.0" / "bin" / "nvcc", NVCC),
        (root / "bin" / "nvidia-smi", NVIDIA_SMI),
        (root / "bin" / "cmake", CMAKE),
    ):
        path.write_text(text)
        path.chmod(0o755)
    sources = {}
    for name, (mirror, tag) in MIRRORS.items():
        archive = root / "mirror" / f"{tag}.tar.gz"
        archive.parent.mkdir(exist_ok=True)
        sources[name] = archive.with_name(f"{name}-{tag}.tar.gz")
        if REAL_SOURCES:
            subprocess.run(
                [
                    "git",
                    "--git-dir",
                    str(mirror),
                    "archive",
                    f"--prefix={name}-{tag[1:]}/",
                    "-o",
                    str(sources[name]),
                    tag,
                ],
                check=True,
            )
            continue
        with tarfile.open(sources[name], "w:gz") as release:
            for member, text in STANDIN_SOURCES[name].items():
                data = text.encode()
                info = tarfile.TarInfo(f"{name}-{tag[1:]}/{member}")
                info.size = len(data)
                release.addfile(info, io.BytesIO(data))
    wheel = root / "mirror" / "nvidia_nccl_cu13-2.28.9-py3-none-manylinux_2_18_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as whl:  # STAND-IN for the wheel: its layout and NCCL's version defines
        whl.writestr(
            "nvidia/nccl/include/nccl.h", "#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n"
        )
        whl.writestr("nvidia/nccl/lib/libnccl.so.2", "stand-in\n")
    variables = {
        "ansible_python_interpreter": sys.executable,
        "gpuops_plan": {"platform": {"name": "compose"}},
        "validate_pcie_gen": 4,
        "burnin_tools_dir": str(root / "cache"),
        "burnin_tools_packages": [],
        "burnin_cuda_home": str(root / "cuda-13.0"),
        "burnin_nccl_tests_url": sources["nccl-tests"].as_uri(),
        "burnin_nccl_tests_checksum": _sha256(sources["nccl-tests"]),
        "burnin_nvbandwidth_url": sources["nvbandwidth"].as_uri(),
        "burnin_nvbandwidth_checksum": _sha256(sources["nvbandwidth"]),
        "burnin_nccl_wheel_url": wheel.as_uri(),
        "burnin_nccl_wheel_checksum": _sha256(wheel),
    }
    return {"root": root, "vars": variables}


def run_cases(site: dict, cases: dict[str, dict], *options: str) -> dict[str, dict]:
    """One ansible-playbook run of the tools stage, each case a host of its own (its variables: the site's, then the
    case's): case -> {stats, results (task name -> result), log (stand-in argv)}. A failed task stops its own host
    only; each host has its own stand-in log (STANDIN_LOG, the play's environment) and its own burnin_work_dir, where
    nccl-tests' release is fetched (a file there is not fetched again)."""
    root = site["root"]
    hosts = {}
    for name, overrides in cases.items():
        log = root / f"{name}.log"
        log.write_text("")
        hosts[name] = {"ansible_connection": "local", **site["vars"], "burnin_work_dir": str(root / f"work-{name}"),
                       "burnin_test_log": str(log), **overrides}
    inventory = root / f"{'+'.join(cases)}.hosts.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    env = playbook_env(
        REPO,
        cache="memory",
        callback="ansible.posix.json",
        extra={"PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}", **NO_PROFILE_TASKS},
    )
    argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), "-e", json.dumps(FACTS), *options]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600)
    document = json_document(proc.stdout)
    assert document.get("stats"), proc.stdout[-3000:] + proc.stderr[-2000:]
    found = {}
    for name in cases:
        # By task name, without the "<role> : " the callback may put first.
        results = {
            task["task"]["name"].rpartition(" : ")[2]: task["hosts"][name]
            for play in document["plays"]
            for task in play["tasks"]
            if name in task["hosts"]
        }
        log = Path(hosts[name]["burnin_test_log"])
        found[name] = {
            "stats": document["stats"][name],
            "results": results,
            "log": [line for line in log.read_text().splitlines() if line],
        }
    return found


def run(site: dict, name: str, *options: str, **overrides) -> dict:
    """One ansible-playbook run of the tools stage on one case's host (``run_cases``)."""
    return run_cases(site, {name: overrides}, *options)[name]


def _tampered(site: dict) -> dict:
    """The tampered case's variables. LABELLED, made here: nccl-tests 2.19.5's release (git archive of its tag from
    the local mirror) under 2.19.6's name and folder, as a proxy or a poisoned cache could serve it (without the
    mirrors: the stand-in release); and nvbandwidth's file under the name of a release no pin covers (0.7)."""
    root = site["root"]
    (root / "tampered").mkdir()
    tampered = root / "tampered" / "nccl-tests-v2.19.6.tar.gz"
    if REAL_SOURCES:
        tampered.write_bytes(
            subprocess.run(
                ["gzip", "-n"], input=_tar("nccl-tests", "v2.19.5", "2.19.6"), capture_output=True, check=True
            ).stdout
        )
    else:
        tampered.write_bytes(Path(site["vars"]["burnin_nccl_tests_url"][len("file://") :]).read_bytes())
    unpinned = root / "tampered" / "nvbandwidth-v0.7.tar.gz"
    unpinned.write_bytes(Path(site["vars"]["burnin_nvbandwidth_url"][len("file://") :]).read_bytes())
    return {
        "burnin_tools_dir": str(root / "cache-tampered"),
        "burnin_nccl_tests_url": tampered.as_uri(),
        "burnin_nccl_tests_checksum": "",
        "burnin_nvbandwidth_url": unpinned.as_uri(),
        "burnin_nvbandwidth_checksum": "",
    }


@pytest.fixture(scope="module")
def first_runs(site: dict) -> dict[str, dict]:
    """The first build, the refusal without nvcc and the tampered releases: three hosts of one run, each with its own
    cache (burnin_tools_dir) and work folder."""
    empty = site["root"] / "no-cuda"
    empty.mkdir()
    return run_cases(site, {
        "first": {},
        "refused": {"burnin_cuda_home": str(empty), "burnin_tools_dir": str(site["root"] / "cache-refused")},
        "tampered": _tampered(site),
    })


def test_missing_tools_are_built_once_then_the_stamp_skips_the_build(site: dict, first_runs: dict) -> None:
    cache = site["root"] / "cache"
    nccl_tests = cache / "nccl-tests-2.19.6-cuda13.0-nccl2.28.9-sm90"
    nvbandwidth = cache / "nvbandwidth-0.8-cuda13.0-sm90"
    nccl_home = cache / "nccl-2.28.9" / "nvidia" / "nccl"

    first = first_runs["first"]
    assert (first["stats"]["failures"], first["stats"]["changed"] > 0) == (0, True), first["results"]
    plan = first["results"][PLAN]["ansible_facts"]["__burnin_tools"]
    assert [b["tool"] for b in plan["build"]] == ["nvbandwidth", "nccl-tests"]
    assert plan["all_reduce_perf"] == f"{nccl_tests}/build/all_reduce_perf"
    assert plan["env"] == {"LD_LIBRARY_PATH": f"{nccl_home}/lib:{site['root'] / 'cuda-13.0'}/lib64"}
    builds = first["results"]["Burn-in | tools - build"]["results"]
    assert [r["cmd"] for r in builds] == [
        [
            "cmake",
            "-S",
            str(nvbandwidth),
            "-B",
            f"{nvbandwidth}/build",
            f"-DCMAKE_CUDA_COMPILER={site['root'] / 'cuda-13.0'}/bin/nvcc",
            "-DCMAKE_CUDA_ARCHITECTURES=90",
        ],
        ["make", "-C", f"{nvbandwidth}/build", "-j"],
        [
            "make",
            "-C",
            str(nccl_tests),
            "-j",
            "MPI=0",
            f"CUDA_HOME={site['root'] / 'cuda-13.0'}",
            f"NCCL_HOME={nccl_home}",
            f"NVCC_GENCODE={GENCODE}",
        ],
    ]
    # What nccl-tests' own Makefile made of those arguments: every compile for sm_90 against the wheel's NCCL.
    compiles = [line for line in first["log"] if line.startswith("nvcc ") and " -c " in line]
    # the real Makefile: 11 collectives + common, util, verifiable; the stand-in: one
    assert len(compiles) >= (12 if REAL_SOURCES else 1), first["log"]
    assert all(GENCODE in line and f"-I{nccl_home}/include/" in line for line in compiles)
    link = next(line for line in first["log"] if f"-o {nccl_tests}/build/all_reduce_perf " in line)
    assert f"-L{nccl_home}/lib -lnccl" in link
    assert "nvidia-smi --query-gpu=compute_cap --format=csv,noheader" in first["log"]
    # nccl-tests' release is fetched to its one file, the one the pairs' image and validate unpack (work_dir).
    assert (site["root"] / "work-first" / "nccl-tests-2.19.6.tar.gz").is_file()
    assert (nccl_home / "lib" / "libnccl.so").readlink() == Path("libnccl.so.2")
    for folder, binary in ((nccl_tests, "build/all_reduce_perf"), (nvbandwidth, "build/nvbandwidth")):
        assert (folder / binary).is_file()
        stamp = json.loads((folder / ".gpuops-built").read_text())
        assert (stamp["cuda_release"], stamp["archs"], stamp["binary"]) == ("13.0", ["90"], str(folder / binary))

    second = run(site, "second")
    assert (second["stats"]["failures"], second["stats"]["changed"]) == (0, 0), second["results"]
    again = second["results"][PLAN]["ansible_facts"]
    assert again["__burnin_tools"]["build"] == []
    assert again["__burnin_tools"]["all_reduce_perf"] == plan["all_reduce_perf"]
    assert not any(line.startswith(("cmake", "nvcc -o", "nvcc -c")) for line in second["log"]), second["log"]


def test_no_nvcc_is_refused_before_anything_is_fetched(site: dict, first_runs: dict) -> None:
    empty = site["root"] / "no-cuda"
    cache = site["root"] / "cache-refused"
    refused = first_runs["refused"]
    assert (refused["stats"]["failures"], refused["stats"]["changed"]) == (1, 0)
    message = refused["results"]["Burn-in | tools - a build needs the CUDA toolkit"]["msg"]
    assert (
        f"burn-in builds nvbandwidth and nccl-tests on this host (not found in PATH) but finds no CUDA toolkit "
        f"(bin/nvcc) at {empty}" in message
    )
    assert "set burnin_cuda_home" in message
    assert "burnin_tools_build: false" in message
    assert not cache.exists()


def test_check_mode_says_what_it_would_build_and_builds_nothing(site: dict) -> None:
    cache = site["root"] / "cache-check"
    checked = run(site, "check", "--check", burnin_tools_dir=str(cache))
    assert (checked["stats"]["failures"], checked["stats"]["changed"]) == (0, 0)
    message = checked["results"]["Burn-in | tools - what a run would build (check mode builds nothing)"]["msg"]
    assert message == (
        f"would build {cache}/nvbandwidth-0.8-cuda13.0-sm90, {cache}/nccl-tests-2.19.6-cuda13.0-nccl2.28.9-sm90"
    )
    assert not cache.exists()


CHECKED = "Burn-in | each release is the pinned one, before anything of it is unpacked or built"


def _needs_mirrors() -> None:
    """The pins are checked against NVIDIA's own repositories, git mirrors kept outside the repository on a development
    machine (GPUOPS_SOURCE_MIRRORS); a CI machine cannot reach GitHub and has none, by design. Without them the pin
    check itself is still tested, on labelled stand-in releases (the refusal tests below)."""
    if not REAL_SOURCES:
        skip_by_design(f"no git mirrors of NVIDIA/nccl-tests and NVIDIA/nvbandwidth in {MIRROR} "
                       "(GPUOPS_SOURCE_MIRRORS): the pins are checked against upstream only where they are; the "
                       "stand-in tests run everywhere")


def _tar(tool: str, tag: str, version: str = "") -> bytes:
    """git archive --format=tar of a tag of the local mirror, with GitHub's prefix <tool>-<version>/."""
    prefix = f"--prefix={tool}-{version or tag.removeprefix('v')}/"
    return subprocess.run(
        ["git", "--git-dir", str(MIRRORS[tool][0]), "archive", "--format=tar", prefix, tag],
        capture_output=True,
        check=True,
    ).stdout


def test_every_default_source_is_a_pinned_release() -> None:
    defaults = yaml.safe_load((REPO / "roles" / "burnin" / "defaults" / "main.yml").read_text())
    urls = {"nccl-tests": defaults["burnin_nccl_tests_url"], "nvbandwidth": defaults["burnin_nvbandwidth_url"]}
    assert set(PINS) == set(urls)
    for tool, url in urls.items():
        version = url.rsplit("/v", 1)[1].removesuffix(".tar.gz")
        github = f"https://github.com/NVIDIA/{tool}/archive/refs/tags/{PINS[tool][version]['tag']}.tar.gz"
        assert (defaults[f"burnin_{tool.replace('-', '_')}_checksum"], url) == ("", github)
    # One nccl-tests release: one pin, the one the default URL names.
    assert list(PINS["nccl-tests"]) == [urls["nccl-tests"].rsplit("/v", 1)[1].removesuffix(".tar.gz")]


def test_the_host_build_takes_the_release_of_the_image_and_validate() -> None:
    # The pairs' image and validate's tree (nccl_tests_source.yml) and the host build (burnin_jobs.tools) take one
    # release, _burnin_nccl_tests of vars/main.yml: _burnin_config carries it to the filter, which computes none.
    assert "burnin_tools(_burnin_config," in (REPO / "roles" / "burnin" / "tasks" / "tools.yml").read_text()
    assert "'nccl_tests': _burnin_nccl_tests" in (REPO / "roles" / "burnin" / "vars" / "main.yml").read_text()
    assert "_burnin_nccl_tests" in (REPO / "roles" / "burnin" / "tasks" / "nccl_tests_source.yml").read_text()
    assert "nccl_tests_url" not in (REPO / "plugins" / "plugin_utils" / "burnin_jobs.py").read_text()


# An nccl-tests release named in YAML or Jinja: a GitHub archive or release URL, a versioned file or folder name, a
# v-tag or a pin table's version key.
NCCL_TESTS_RELEASE = re.compile(
    r"nccl-tests[^\s\"'`]*?[/-]v?(\d+\.\d+\.\d+)|^\s+v?(\d+\.\d+\.\d+):\s*$|\btag: v(\d+\.\d+\.\d+)", re.M
)
NCCL_TESTS_SOURCE = re.compile(r"[a-z]+://[^\s\"'`]*nccl-tests")  # a URL: https://, file://, ...


def nccl_tests_sources(text: str) -> tuple[set[str], int]:
    """(the nccl-tests releases a YAML/Jinja text names, how many nccl-tests URLs it names)."""
    versions = {next(v for v in m.groups() if v) for m in NCCL_TESTS_RELEASE.finditer(text)}
    return versions, len(NCCL_TESTS_SOURCE.findall(text))


def test_the_finder_sees_a_second_release_and_a_second_source() -> None:
    assert nccl_tests_sources("u: https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.13.11.tar.gz\n") == (
        {"2.13.11"}, 1)
    assert nccl_tests_sources("d: /var/cache/gpuops/nccl-tests-2.13.11\n") == ({"2.13.11"}, 0)
    assert nccl_tests_sources("    nccl-tests:\n      2.19.6:\n        tag: v2.19.6\n      2.13.11:\n") == (
        {"2.19.6", "2.13.11"}, 0)
    assert nccl_tests_sources("x: nccl-tests {{ v }} (MPI=1) at /opt/nccl-tests\n") == (set(), 0)
    assert nccl_tests_sources("url: file:///srv/mirror/nccl-tests.tgz\n") == (set(), 1)
    assert nccl_tests_sources("f: <burnin_work_dir>/nccl-tests-<version>.tar.gz\n") == (set(), 0)


def test_roles_and_playbooks_build_one_nccl_tests_release_from_one_source() -> None:
    """validate, the pairs' image and the host build share burnin_nccl_tests_url: no second release or URL."""
    files = sorted(p for d in ("roles", "playbooks") for p in (REPO / d).rglob("*")
                   if p.suffix in (".yml", ".yaml", ".j2") and p.is_file())
    found = {p.relative_to(REPO).as_posix(): nccl_tests_sources(p.read_text()) for p in files}
    found = {path: hit for path, hit in found.items() if hit != (set(), 0)}
    defaults = "roles/burnin/defaults/main.yml"
    assert found.pop(defaults) == ({"2.19.6"}, 1), defaults
    assert found.pop("roles/burnin/meta/argument_specs.yml") == ({"2.19.6"}, 1)  # the default, documented
    assert found.pop("roles/burnin/vars/main.yml")[0] == {"2.19.6"}  # the pin, and the recipe's provenance
    assert found == {}, f"another nccl-tests release or source besides {defaults}'s burnin_nccl_tests_url: {found}"
    gather = (REPO / "roles" / "validate" / "tasks" / "gather.yml").read_text()
    assert "tasks_from: nccl_tests_source\n" in gather
    assert '"{{ burnin_nccl_tests_tree }}:/src"' in gather


@pytest.mark.parametrize(("tool", "version"), [(tool, version) for tool in sorted(PINS) for version in PINS[tool]])
def test_each_pin_is_the_tag_of_the_local_mirror(tool: str, version: str) -> None:
    _needs_mirrors()
    pin = PINS[tool][version]
    tar = _tar(tool, pin["tag"], version)
    assert hashlib.sha256(tar).hexdigest() == pin["tar_sha256"]
    git = ["git", "--git-dir", str(MIRRORS[tool][0])]
    commit = subprocess.run([*git, "rev-parse", f"{pin['tag']}^{{commit}}"], capture_output=True, text=True, check=True)
    in_tar = subprocess.run([*git, "get-tar-commit-id"], input=tar, capture_output=True, check=True)
    assert (commit.stdout.strip(), in_tar.stdout.decode().strip()) == (pin["commit"], pin["commit"])


@pytest.mark.parametrize(("tool", "tag"), list(SPACK))
def test_the_tar_gzipped_as_github_does_is_githubs_archive(tool: str, tag: str) -> None:
    _needs_mirrors()
    gzipped = subprocess.run(["gzip", "-n"], input=_tar(tool, tag), capture_output=True, check=True).stdout
    assert hashlib.sha256(gzipped).hexdigest() == SPACK[(tool, tag)]


def test_the_default_sources_are_checked_against_their_pins_then_built(site: dict) -> None:
    _needs_mirrors()
    cache = site["root"] / "cache-pinned"
    pinned = run(
        site, "pinned", burnin_tools_dir=str(cache), burnin_nccl_tests_checksum="", burnin_nvbandwidth_checksum=""
    )
    assert (pinned["stats"]["failures"], pinned["stats"]["changed"] > 0) == (0, True), pinned["results"]
    checked = pinned["results"][
        "Burn-in | the sha256 of the tar in each release fetched without a checksum (its pin's)"
    ]["results"]
    assert [(r["item"]["tool"], r["stdout"][:64]) for r in checked] == [
        ("nvbandwidth", PINS["nvbandwidth"]["0.8"]["tar_sha256"]),
        ("nccl-tests", PINS["nccl-tests"]["2.19.6"]["tar_sha256"]),
    ]
    # The files are git's own gzip of the tar, not GitHub's gzip -n: the pin is of what is inside.
    nvbandwidth = Path(pinned["results"][PLAN]["ansible_facts"]["__burnin_tools"]["build"][0]["dir"] + ".tar.gz")
    assert _sha256(nvbandwidth) != "sha256:" + SPACK[("nvbandwidth", "v0.8")]
    assert (cache / "nccl-tests-2.19.6-cuda13.0-nccl2.28.9-sm90" / "build" / "all_reduce_perf").is_file()


def test_another_release_under_a_pinned_name_is_refused_before_anything_is_unpacked(site: dict,
                                                                                    first_runs: dict) -> None:
    root = site["root"]
    cache = root / "cache-tampered"
    tampered = root / "tampered" / "nccl-tests-v2.19.6.tar.gz"
    unpinned = root / "tampered" / "nvbandwidth-v0.7.tar.gz"
    found = hashlib.sha256(gzip.decompress(tampered.read_bytes())).hexdigest()
    refused = first_runs["tampered"]
    assert refused["stats"]["failures"] == 1, refused["results"]
    nvbandwidth_msg, nccl_tests_msg = [r["msg"] for r in refused["results"][CHECKED]["results"]]
    nvbandwidth_dir, nccl_tests_dir = (
        cache / "nvbandwidth-0.7-cuda13.0-sm90",
        cache / "nccl-tests-2.19.6-cuda13.0-nccl2.28.9-sm90",
    )
    pin = PINS["nccl-tests"]["2.19.6"]
    archive = root / "work-tampered" / "nccl-tests-2.19.6.tar.gz"  # the one file of the release (nccl_tests_source)
    assert nccl_tests_msg.startswith(
        f"tampered: nccl-tests 2.19.6 from {tampered.as_uri()} is not the release burn-in pins: the sha256 of its tar "
        f"(gzip -dc {archive} | sha256sum) is {found}; pinned: {pin['tar_sha256']}, the tar of git "
        "archive --format=tar --prefix=nccl-tests-2.19.6/ v2.19.6 of github.com/NVIDIA/nccl-tests "
        f"(commit {pin['commit']}). The file was removed and nothing of it was built."
    ), nccl_tests_msg
    assert nvbandwidth_msg.startswith(
        f"tampered: nvbandwidth 0.7 from {unpinned.as_uri()} is not the release burn-in pins: it has no checksum, and "
        "burn-in pins no nvbandwidth 0.7 (it pins 0.8). The file was removed"
    ), nvbandwidth_msg
    assert "set burnin_nvbandwidth_checksum to sha256:<hex> of a copy you trust (sha256sum)" in nvbandwidth_msg
    # Removed, so a later run fetches again; nothing unpacked, nothing built.
    assert not archive.exists()
    assert not nvbandwidth_dir.with_name(nvbandwidth_dir.name + ".tar.gz").exists()
    assert (list(nccl_tests_dir.iterdir()), list(nvbandwidth_dir.iterdir())) == ([], [])
    assert not any(line.startswith(("cmake", "nvcc -o", "nvcc -c")) for line in refused["log"]), refused["log"]


DOCKER = """#!/bin/sh
# STAND-IN for docker (no image is built here): records its argv; `docker image inspect` finds no image.
echo "docker $*" >> "$STANDIN_LOG"
[ "$1" != image ]
"""


def _image_run(site: dict, name: str, release: bytes, tasks: str = "compose_node.yml") -> tuple[dict, Path]:
    """compose_node.yml (the pairs' image on Compose), or ``tasks``, with burnin_nccl_tests_url a file:// URL of
    ``release`` named as nccl-tests 2.19.6 (the pinned release) and no checksum, docker a stand-in: (the run, the
    work dir)."""
    root = site["root"]
    (root / "bin" / "docker").write_text(DOCKER)
    (root / "bin" / "docker").chmod(0o755)
    source = root / name / "nccl-tests-v2.19.6.tar.gz"
    source.parent.mkdir()
    source.write_bytes(release)
    work = root / name / "work"
    result = run(
        site,
        name,
        burnin_test_tasks_from=tasks,
        burnin_work_dir=str(work),
        burnin_nccl_tests_url=source.as_uri(),
        burnin_nccl_tests_checksum="",
        validate_nccl_build_image="nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04",
        gpuops_plan={"pins": {"registry_mirror": ""}},
        # what roles/validate/tasks/gather.yml passes (compose_node.yml passes image itself)
        **({"burnin_nccl_tests_for": "validate"} if tasks == "nccl_tests_source" else {}),
    )
    return result, work


def _gzip(data: bytes) -> bytes:
    return subprocess.run(["gzip", "-n"], input=data, capture_output=True, check=True).stdout


def test_the_pairs_image_builds_the_pinned_release(site: dict) -> None:
    _needs_mirrors()
    built, work = _image_run(site, "image", _gzip(_tar("nccl-tests", "v2.19.6")))
    assert built["stats"]["failures"] == 0, built["results"]
    assert (work / "image" / "nccl-tests-2.19.6" / "Makefile").is_file()
    dockerfile = (work / "image" / "Dockerfile").read_text()
    assert "COPY nccl-tests-2.19.6 /opt/nccl-tests\n" in dockerfile, dockerfile
    assert " MPI=1 " in dockerfile, dockerfile
    assert f"docker build --pull=false -t gpuops/nccl-tests-mpi:2.19.6 {work}/image" in built["log"], built["log"]


def test_validate_unpacks_the_same_checked_release_into_its_own_tree(site: dict) -> None:
    # The entry point nccl_tests_source as roles/validate/tasks/gather.yml includes it (burnin_nccl_tests_for:
    # validate), its argument spec checked.
    _needs_mirrors()
    release = _gzip(_tar("nccl-tests", "v2.19.6"))
    unpacked, work = _image_run(site, "validate", release, tasks="nccl_tests_source")
    assert unpacked["stats"]["failures"] == 0, unpacked["results"]
    checked = unpacked["results"][
        "Burn-in | the sha256 of the tar in each release fetched without a checksum (its pin's)"
    ]["results"]
    assert [r["stdout"][:64] for r in checked] == [PINS["nccl-tests"]["2.19.6"]["tar_sha256"]]
    tree = work / "validate" / "nccl-tests-2.19.6"
    facts = unpacked["results"]["Burn-in | the tree of nccl-tests for this use"]["ansible_facts"]
    assert facts["burnin_nccl_tests_tree"] == str(tree)
    assert (tree / "Makefile").is_file()
    assert (work / "nccl-tests-2.19.6.tar.gz").is_file()
    assert not (work / "image").exists()


def test_the_pairs_image_refuses_another_release_before_unpacking_it(site: dict) -> None:
    # LABELLED, made here: nccl-tests 2.19.5's release under 2.19.6's name (without the mirrors: the stand-in).
    other = (
        _gzip(_tar("nccl-tests", "v2.19.5", "2.19.6"))
        if REAL_SOURCES
        else Path(site["vars"]["burnin_nccl_tests_url"][len("file://") :]).read_bytes()
    )
    refused, work = _image_run(site, "image-other", other)
    assert refused["stats"]["failures"] == 1, refused["results"]
    [message] = [r["msg"] for r in refused["results"][CHECKED]["results"]]
    assert message.startswith(
        f"image-other: nccl-tests 2.19.6 from {(work.parent / 'nccl-tests-v2.19.6.tar.gz').as_uri()} is not the "
        "release burn-in pins: the sha256 of its tar"
    ), message
    assert message.endswith(
        "Fix: keep burnin_nccl_tests_url at a pinned release and find what served another file (a proxy that "
        "rewrites downloads?), or set burnin_nccl_tests_checksum to sha256:<hex> of a copy you trust (sha256sum)"
    ), message
    assert not (work / "image" / "nccl-tests-2.19.6" / "Makefile").exists()
    assert not any(line.startswith("docker build") for line in refused["log"]), refused["log"]


# validate.yml on this machine (connection local) with two GPUs, so that its all_reduce_perf step runs: stand-ins,
# each labelled, for what this machine has not. nvidia-smi answers from real captures read in place: H200's -q -x
# (../shared/data/nvidia-smi/h200-driver580) with its one <gpu> written twice (the second at the next PCI address,
# minor number and UUID: a 2-GPU host made here) and a real 2-GPU topo -m (nvidia-smi/topo, an A100 x2 NV12 VM).
VALIDATE_NVIDIA_SMI = """#!/bin/sh
# STAND-IN for nvidia-smi (no GPU here): -q -x of a 2-GPU host made from H200's real capture (test_burnin_tools.py),
# a real 2-GPU topo -m capture, and the UUIDs of those two GPUs.
echo "nvidia-smi $*" >> "$STANDIN_LOG"
case "$*" in
  "-q -x") cat "$STANDIN_DIR/q.xml" ;;
  "topo -m") cat "$STANDIN_TOPO" ;;
  "--query-gpu=index,uuid --format=csv,noheader") printf '0, %s\\n1, %s\\n' "$UUID0" "$UUID1" ;;
  *) echo "stand-in nvidia-smi: no capture for: $*" >&2; exit 2 ;;
esac
"""
VALIDATE_DOCKER = """#!/bin/sh
# STAND-IN for docker (no GPU, no image here): records its argv; docker info answers as a daemon with runc only;
# every container exits 0 with no output.
echo "docker $*" >> "$STANDIN_LOG"
[ "$1" != info ] || echo '{"Runtimes": {"runc": {}}}'
"""


def test_validate_builds_burnins_checked_release_in_its_own_tree(site: dict) -> None:
    """playbooks/validate.yml's all_reduce_perf step takes burn-in's release through the entry point
    nccl_tests_source (checked, then unpacked into validate's tree) and builds that tree in the CUDA devel image."""
    h200 = shared_path("nvidia-smi", "h200-driver580", "q.xml").read_text()
    topo = shared_path("nvidia-smi", "topo", "azure-nc48v4_a100-80gb-x2_nv12_cpuaff-0-1_VM-QUIRK.txt")
    root = site["root"] / "validate-play"
    (root / "bin").mkdir(parents=True)
    start, end = h200.index("\t<gpu id="), h200.index("\t</gpu>\n") + len("\t</gpu>\n")
    uuid0 = re.search(r"<uuid>(GPU-[^<]+)</uuid>", h200).group(1)
    uuid1 = uuid0[:-1] + ("0" if uuid0[-1] != "0" else "1")
    second = (h200[start:end].replace("00000000:00:06.0", "00000000:00:07.0").replace(uuid0, uuid1)
              .replace("<minor_number>0</minor_number>", "<minor_number>1</minor_number>"))
    assert second != h200[start:end]
    two = h200[:end] + second + h200[end:]
    (root / "q.xml").write_text(two.replace("<attached_gpus>1</attached_gpus>", "<attached_gpus>2</attached_gpus>"))
    for name, text in (("nvidia-smi", VALIDATE_NVIDIA_SMI), ("docker", VALIDATE_DOCKER)):
        (root / "bin" / name).write_text(text)
        (root / "bin" / name).chmod(0o755)
    if REAL_SOURCES:  # the mirror's tag, fetched without a checksum: checked against the pin
        source, checksum = root / "nccl-tests-v2.19.6.tar.gz", ""
        source.write_bytes(_gzip(_tar("nccl-tests", "v2.19.6")))
    else:  # the stand-in release, with its checksum
        source = Path(site["vars"]["burnin_nccl_tests_url"][len("file://"):])
        checksum = site["vars"]["burnin_nccl_tests_checksum"]
    (root / "hosts.yml").write_text(json.dumps({"all": {"vars": {"gpuops_platform": "compose"}, "children": {
        "gpu_nodes": {"hosts": {"localhost": {"ansible_connection": "local",
                                              "ansible_python_interpreter": sys.executable}}}}}}))
    log, work = root / "log", root / "work"
    extra = {"validate_fail_on_failed": False, "gpuops_report_dir": str(root / "reports"),
             "burnin_work_dir": str(work), "burnin_nccl_tests_url": source.as_uri(),
             "burnin_nccl_tests_checksum": checksum}
    env = playbook_env(REPO, cache="memory", bin_dir=root / "bin", extra={
        "STANDIN_LOG": str(log), "STANDIN_DIR": str(root), "STANDIN_TOPO": str(topo), "UUID0": uuid0, "UUID1": uuid1})
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(root / "hosts.yml"), str(REPO / "playbooks" / "validate.yml"),
         "-e", json.dumps(extra)],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    tree = work / "validate" / "nccl-tests-2.19.6"
    assert (tree / "Makefile").is_file()
    assert (work / "nccl-tests-2.19.6.tar.gz").read_bytes() == source.read_bytes()
    if REAL_SOURCES:
        assert "Burn-in | each release is the pinned one, before anything of it is unpacked or built" in proc.stdout
    [build] = [line for line in log.read_text().splitlines() if "all_reduce_perf" in line]
    assert build == (
        f"docker run --rm --gpus all --ipc=host -v {tree}:/src -w /src nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04 "
        "bash -c make -s -j MPI=0 >/dev/null && ./build/all_reduce_perf -b 8M -e 256M -f 2 -g 2"
    )
