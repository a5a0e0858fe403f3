#!/usr/bin/env python3
"""Build LABELLED TEST STAND-IN .debs that copy the package names and dependency structure of NVIDIA's apt
repositories (nvidia-repo-structure.yml, converted to JSON by the scenario's prepare), into OUTDIR.

  build-standin-nvidia.py STRUCTURE.json OUTDIR                    the CUDA repository's driver packages, at
                                                                   every version the structure lists
  build-standin-nvidia.py STRUCTURE.json OUTDIR --toolkit V [V...]  the Container Toolkit's packages at V...
  build-standin-nvidia.py STRUCTURE.json OUTDIR --dcgm [V...]       DCGM 4's packages at V... (default: the
                                                                   structure's dcgm_versions), with its epoch

They hold no driver and no toolkit: a doc file saying what they are; for the packages whose real counterpart
ships a systemd unit the role enables (Fabric Manager, nvidia-persistenced), a unit that runs a labelled sleep;
for the toolkit and DCGM, the labelled stand-in programs of standin/ next to this script where NVIDIA's package ships
the real ones (the structure's "payload"). stanza() is imported by the unit tests, so the index they resolve
is the one these packages make.
"""

import json
import os
import subprocess
import sys
import tempfile

LABEL = "TEST STAND-IN built by the gpuops.cluster test scenarios; NOT NVIDIA's package, no driver inside"
HERE = os.path.dirname(os.path.abspath(__file__))


def fill(text, branch, version, epoch=""):
    full = f"{epoch}:{version}-1" if epoch else version + "-1"
    return (text.replace("{branch}", branch).replace("{version}", full).replace("{toolkit}", full)
            .replace("{dcgm}", full))


def stanza(pkg, branch, version, epoch=""):
    """The control fields of one stand-in: NVIDIA's name, version (with its epoch, where NVIDIA's has one) and
    dependencies (the structure's), plus the test-only dependencies the stand-in programs need to run."""
    depends = pkg.get("depends_by_version", {}).get(version, pkg.get("depends", []))
    fields = {"Package": fill(pkg["name"], branch, version), "Version": fill("{version}", branch, version, epoch)}
    depends = [fill(d, branch, version, epoch) for d in depends] + list(pkg.get("standin_depends", []))
    if depends:
        fields["Depends"] = ", ".join(depends)
    if pkg.get("conflicts"):
        fields["Conflicts"] = ", ".join(pkg["conflicts"])
    return fields


def build(pkg, branch, version, outdir, epoch=""):
    fields = stanza(pkg, branch, version, epoch)
    name = fields["Package"]
    with tempfile.TemporaryDirectory() as root:
        os.chmod(root, 0o755)
        os.makedirs(os.path.join(root, "DEBIAN"))
        doc = os.path.join(root, "usr/share/doc", name)
        os.makedirs(doc)
        with open(os.path.join(doc, "GPUOPS-TEST-STANDIN"), "w", encoding="utf-8") as handle:
            handle.write(f"{name} {fields['Version']}: {LABEL}.\nStructure source: {pkg.get('source', '?')} "
                         "(molecule/driver/files/nvidia-repo-structure.yml).\n")
        if pkg.get("service"):
            units = os.path.join(root, "lib/systemd/system")
            os.makedirs(units)
            with open(os.path.join(units, pkg["service"] + ".service"), "w", encoding="utf-8") as handle:
                handle.write(f"[Unit]\nDescription={pkg['service']} ({LABEL})\n[Service]\n"
                             "ExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n")
        for dest, source in pkg.get("payload", {}).items():
            path = os.path.join(root, dest)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(os.path.join(HERE, "standin", source), encoding="utf-8") as handle:
                text = handle.read().replace("@VERSION@", version)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(path, 0o755 if dest.startswith("usr/bin/") else 0o644)
        if pkg.get("conffiles"):
            with open(os.path.join(root, "DEBIAN/conffiles"), "w", encoding="utf-8") as handle:
                handle.write("\n".join(pkg["conffiles"]) + "\n")
        control = [f"{key}: {value}" for key, value in fields.items()] + [
            "Architecture: all",
            "Maintainer: gpuops.cluster test suite <tests@gpuops.invalid>",
            "Section: non-free/libs",
            "Priority: optional",
            f"Description: {LABEL}\n Copies the name and dependencies of NVIDIA's {name}.",
        ]
        with open(os.path.join(root, "DEBIAN/control"), "w", encoding="utf-8") as handle:
            handle.write("\n".join(control) + "\n")
        out = os.path.join(outdir, f"{name}_{version}-1_all.deb")
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, out],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def main():
    structure_file, outdir, *rest = sys.argv[1:]
    with open(structure_file, encoding="utf-8") as handle:
        structure = json.load(handle)
    os.makedirs(outdir, exist_ok=True)
    branch = structure["driver_branch"]
    epoch = ""
    if rest[:1] == ["--dcgm"]:
        epoch = structure["dcgm_epoch"]
        jobs = [(pkg, version) for pkg in structure["dcgm"] for version in rest[1:] or structure["dcgm_versions"]]
    elif rest[:1] == ["--toolkit"]:
        jobs = [(pkg, version) for pkg in structure["toolkit"] for version in rest[1:] or structure["toolkit_versions"]]
    else:
        jobs = [(pkg, version) for pkg in structure["packages"]
                for version in pkg.get("versions", structure["driver_versions"])]
    for pkg, version in jobs:
        build(pkg, branch, version, outdir, epoch)
    print(f"build-standin-nvidia: {len(jobs)} stand-in .debs in {outdir}")


if __name__ == "__main__":
    main()
