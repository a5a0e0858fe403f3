#!/usr/bin/env bash
# ansible-test sanity on a copy of this checkout laid out as ansible_collections/gpuops/cluster.
# The copy holds the files git tracks (plus new, not ignored ones), without the in-place collections/ link
# and the galaxy build_ignore paths. Exceptions are listed, each with its reason, in tests/sanity/ignore-2.19.txt
# (ones that do not apply) and tests/sanity/known-findings-2.19.txt (findings still to fix, with owners).
# ansible-test bootstraps pip in each test venv with get-pip-<version>.py, downloaded from a host that cannot be
# reached here; a file of that name that runs the standard library's ensurepip stands in for it (written below).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${SANITY_PYTHON:-3.11}
# Outside this git checkout: inside it, ansible-test would list files with git, which ignores build/.
work=${SANITY_DIR:-/tmp/gpuops-sanity-$(id -u)-$(basename "$root")}
tree=$work/ansible_collections/gpuops/cluster

pip_version=$(python - <<'PY'
import re, ansible_test, pathlib
text = (pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
print(re.search(r"pip='([0-9.]+)'", text).group(1))
PY
)
cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
cat >"$cache/get_pip_${pip_version//./_}.py" <<'PY'
# Stand-in for get-pip.py (written by gpuops.cluster scripts/sanity.sh; the real one is not reachable here):
# install the pip bundled with the standard library, then let pip install what ansible-test asked for.
import ensurepip
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
# get-pip.py's own options go; so does the pin of pip itself, which the package index here does not offer:
# the venv keeps the pip that ensurepip bundles.
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel") and not a.startswith("pip==")]
if any(not a.startswith("-") for a in args):
    sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args]))
PY

rm -rf "$work"
mkdir -p "$tree"
git ls-files -z --cached --others --exclude-standard \
  | grep -zv -E '^(collections|\.ci|build|reports)/' \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -xf - -C "$tree"
# Findings still to fix (ansible-lint refuses them in an ignore file): listed apart, added to the copy only.
# grep exits 1 when every line is a comment (nothing left to fix): that is success; 2 (no file) is not.
{ grep -v -E '^(#|[[:space:]]*$)' tests/sanity/known-findings-2.19.txt || [ $? -eq 1 ]; } \
  >>"$tree/tests/sanity/ignore-2.19.txt"
rm -f "$tree/tests/sanity/known-findings-2.19.txt"
cd "$tree"
exec ansible-test sanity --python "$python" --requirements --color no "$@"
