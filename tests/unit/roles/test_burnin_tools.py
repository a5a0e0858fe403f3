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
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from ansible_env import json_document, playbook_env

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
        "burnin_platform": "compose",
        "validate_pcie_gen": 4,
        "ansible_facts": {"gpu": {"count": 2}},
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


def run(site: dict, name: str, *options: str, **overrides) -> dict:
    """One ansible-playbook run of the tools stage: {stats, results (task name -> result), log (stand-in argv)}."""
    root = site["root"]
    log = root / f"{name}.log"
    log.write_text("")
    extra = root / f"{name}.json"
    extra.write_text(json.dumps(site["vars"] | overrides))
    env = playbook_env(
        REPO,
        cache="memory",
        callback="ansible.posix.json",
        extra={"PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}", "STANDIN_LOG": str(log)},
    )
    argv = [str(BIN / "ansible-playbook"), "-i", "localhost,", str(PLAYBOOK), "-e", f"@{extra}", *options]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600)
    document = json_document(proc.stdout)
    assert document.get("stats"), proc.stdout[-3000:] + proc.stderr[-2000:]
    # By task name, without the "<role> : " the callback may put first.
    results = {
        task["task"]["name"].rpartition(" : ")[2]: task["hosts"]["localhost"]
        for play in document["plays"]
        for task in play["tasks"]
        if "localhost" in task["hosts"]
    }
    return {
        "stats": document["stats"]["localhost"],
        "results": results,
        "log": [line for line in log.read_text().splitlines() if line],
    }


def test_missing_tools_are_built_once_then_the_stamp_skips_the_build(site: dict) -> None:
    cache = site["root"] / "cache"
    nccl_tests = cache / "nccl-tests-2.19.6-cuda13.0-nccl2.28.9-sm90"
    nvbandwidth = cache / "nvbandwidth-0.8-cuda13.0-sm90"
    nccl_home = cache / "nccl-2.28.9" / "nvidia" / "nccl"

    first = run(site, "first")
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


def test_no_nvcc_is_refused_before_anything_is_fetched(site: dict) -> None:
    empty = site["root"] / "no-cuda"
    empty.mkdir(exist_ok=True)
    cache = site["root"] / "cache-refused"
    refused = run(site, "refused", burnin_cuda_home=str(empty), burnin_tools_dir=str(cache))
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
