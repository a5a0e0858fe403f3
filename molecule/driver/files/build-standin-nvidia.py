#!/usr/bin/env python3
"""Build LABELLED TEST STAND-IN .debs that copy the package names and dependency structure of NVIDIA's
Debian CUDA repository (nvidia-repo-structure.yml, converted to JSON by prepare.yml), at every version the
structure lists, into OUTDIR. They hold no driver: a doc file saying what they are, and, for the packages
whose real counterpart ships a systemd unit the role enables (Fabric Manager, nvidia-persistenced), a unit
that runs a labelled sleep.

Usage: build-standin-nvidia.py STRUCTURE.json OUTDIR
"""

import json
import os
import subprocess
import sys
import tempfile

LABEL = "TEST STAND-IN built by the gpuops.cluster driver scenario; NOT NVIDIA's package, no driver inside"


def fill(text, branch, version):
    return text.replace("{branch}", branch).replace("{version}", version + "-1").replace("{toolkit}", version + "-1")


def build(pkg, branch, version, outdir):
    name = fill(pkg["name"], branch, version)
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "DEBIAN"))
        doc = os.path.join(root, "usr/share/doc", name)
        os.makedirs(doc)
        with open(os.path.join(doc, "GPUOPS-TEST-STANDIN"), "w", encoding="utf-8") as handle:
            handle.write(f"{name} {version}-1: {LABEL}.\nStructure source: {pkg.get('source', '?')} "
                         "(molecule/driver/files/nvidia-repo-structure.yml).\n")
        if pkg.get("service"):
            units = os.path.join(root, "lib/systemd/system")
            os.makedirs(units)
            with open(os.path.join(units, pkg["service"] + ".service"), "w", encoding="utf-8") as handle:
                handle.write(f"[Unit]\nDescription={pkg['service']} ({LABEL})\n[Service]\n"
                             "ExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n")
        control = [
            f"Package: {name}",
            f"Version: {version}-1",
            "Architecture: all",
            "Maintainer: gpuops.cluster test suite <tests@gpuops.invalid>",
            "Section: non-free/libs",
            "Priority: optional",
        ]
        depends = [fill(d, branch, version) for d in pkg.get("depends", [])]
        if depends:
            control.append("Depends: " + ", ".join(depends))
        if pkg.get("conflicts"):
            control.append("Conflicts: " + ", ".join(pkg["conflicts"]))
        control.append(f"Description: {LABEL}\n Copies the name and dependencies of NVIDIA's {name}.")
        with open(os.path.join(root, "DEBIAN/control"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(control) + "\n")
        out = os.path.join(outdir, f"{name}_{version}-1_all.deb")
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, out],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def main():
    structure_file, outdir = sys.argv[1], sys.argv[2]
    with open(structure_file, encoding="utf-8") as handle:
        structure = json.load(handle)
    os.makedirs(outdir, exist_ok=True)
    branch = structure["driver_branch"]
    count = 0
    for pkg in structure["packages"]:
        for version in pkg.get("versions", structure["driver_versions"]):
            build(pkg, branch, version, outdir)
            count += 1
    print(f"build-standin-nvidia: {count} stand-in .debs in {outdir}")


if __name__ == "__main__":
    main()
