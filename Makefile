# gpuops.cluster: every target does its own set-up, idempotently.
#   make test   lint + unit tests + collection build + every Molecule scenario
#   make demo   provision a disposable local "GPU node" container with site.yml
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections
export ANSIBLE_FORCE_COLOR := false
export PY_COLORS := 0
export NO_COLOR := 1
export MOLECULE_NO_LOG := false

SCENARIO ?=

# Read once, when make starts (before any set-up runs), for build/test-summary.json (scripts/test_summary.py): the
# time make began, so the summary's wall time includes the set-up, and what the set-up found: "cold" when neither the
# venv nor the debootstrap images existed yet (a fresh clone on a machine that never ran the suite), "warm" when
# both did, "partial" otherwise.
export GPUOPS_MAKE_STARTED := $(shell date +%s)
export GPUOPS_MAKE_FOUND := $(shell v=0; i=0; test -x $(VENV)/bin/python && v=1; \
  docker image inspect gpuops/debian12-systemd gpuops/debian13-systemd >/dev/null 2>&1 && i=1; \
  case $$v$$i in (00) echo cold;; (11) echo warm;; (*) echo partial;; esac)

.PHONY: help setup host venv images image-debian12 image-debian13 lint unit collection report-test ops-test bad-input-test dnf-test site-check-test gpu-test gpu-check record-gpu-check molecule test record-test demo demo-clean bench clean

help:
	@echo "make test      run the whole suite (lint, unit, collection build, Molecule)"
	@echo "make demo      provision a local systemd container as a GPU node with site.yml"
	@echo "make molecule SCENARIO=name   run one Molecule scenario"
	@echo "make docs      regenerate docs/roles/*.md from each role's meta/argument_specs.yml"
	@echo "               and the figures in docs/performance.md and README.md from bench/results.json"
	@echo "make record-test   after a full make test: keep its build/test-summary.json as bench/test-summary.json"
	@echo "make gpu-check [WHEELS=DIR]   the acceptance run for one GPU host (build/gpu-check/report.md)"
	@echo "make record-gpu-check   keep its build/gpu-check/report.json as bench/gpu-check.json"
	@echo "make lint | unit | collection | report-test | ops-test | bad-input-test | dnf-test | site-check-test | gpu-test | bench | clean"

host:
	@scripts/bootstrap.sh

# The venv is rebuilt only when requirements.txt changes.
$(VENV)/.installed: requirements.txt
	@command -v python3 >/dev/null || { echo "setup: ERROR: python3 not found. Fix: apt-get install python3 python3-venv" >&2; exit 1; }
	@test -x $(VENV)/bin/python || python3 -m venv $(VENV) || { echo "setup: ERROR: python3 -m venv failed. Fix: apt-get install python3-venv" >&2; exit 1; }
	@echo "setup: installing pinned Python dependencies into .venv"
	@$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt \
	  || { echo "setup: ERROR: pip install -r requirements.txt failed (see above). Fix: check access to PyPI, then rerun." >&2; exit 1; }
	@touch $@

# gpuops-run (pyproject.toml, gpuops_run/): a regular (not editable) install, so the venv does not
# depend on this checkout staying where it is; redone when the package changes.
$(VENV)/.gpuops-run-installed: $(VENV)/.installed pyproject.toml $(wildcard gpuops_run/*.py)
	@echo "setup: installing the gpuops-run console script into .venv"
	@$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps . \
	  || { echo "setup: ERROR: pip install . (gpuops-run) failed (see above). Fix: check pyproject.toml, then rerun." >&2; exit 1; }
	@rm -rf build/lib build/bdist.* gpuops_run.egg-info
	@touch $@

# IBM's network-config-analyzer, which judges tenant isolation in tests/render, pins a PyYAML that requirements.txt
# cannot share, so it gets a venv of its own inside .venv (requirements-nca.txt says why).
$(VENV)/nca/.installed: requirements-nca.txt
	@test -x $(VENV)/nca/bin/python || python3 -m venv $(VENV)/nca || { echo "setup: ERROR: python3 -m venv .venv/nca failed. Fix: apt-get install python3-venv" >&2; exit 1; }
	@echo "setup: installing network-config-analyzer into .venv/nca"
	@$(VENV)/nca/bin/pip install -q --disable-pip-version-check -r requirements-nca.txt \
	  || { echo "setup: ERROR: pip install -r requirements-nca.txt failed (see above). Fix: check access to PyPI, then rerun." >&2; exit 1; }
	@touch $@

venv: $(VENV)/.installed $(VENV)/.gpuops-run-installed $(VENV)/nca/.installed

# The two debootstrap images build at the same time (each mostly waits on the Debian mirror and dpkg), and in
# `make setup` alongside the venv's pip install; -O prints each target's output whole when it ends.
images: host
	@$(MAKE) --no-print-directory -j2 -O image-debian12 image-debian13

image-debian12 image-debian13:
	@scripts/build-images.sh $(@:image-%=%)

setup: host
	@$(MAKE) --no-print-directory -j3 -O venv image-debian12 image-debian13

lint: venv
	@scripts/run-tests.sh lint

# Role pages: the block between the markers in docs/roles/<role>.md, from meta/argument_specs.yml; the figures
# blocks of docs/performance.md and README.md, from bench/results.json and bench/test-summary.json.
docs: venv
	@$(VENV)/bin/python scripts/gen-role-docs

# The README's test figures come from the last full `make test` recorded here (build/ is not tracked): copy its
# build/test-summary.json to bench/test-summary.json (a full run only), then regenerate the docs; commit both.
record-test: venv
	@$(VENV)/bin/python bench/figures.py record-test build/test-summary.json
	@$(VENV)/bin/python scripts/gen-role-docs

unit: venv
	@scripts/run-tests.sh unit

collection: venv
	@scripts/run-tests.sh collection

# The fleet report in headless Chromium (installed by scripts/bootstrap.sh).
report-test: host venv
	@scripts/run-tests.sh report

# On a GPU host: tests/gpu (gpu_facts, topology, driver, validate and diagnose live, gpu_health); skips with the reason elsewhere.
gpu-test: venv
	@$(VENV)/bin/pytest -q -p no:cacheprovider -rs tests/gpu

# The acceptance run for one GPU host (scripts/gpu_check.py; its steps: docs/testing.md): build/gpu-check/report.{json,md},
# non-zero on any failure and on a host without a GPU. WHEELS=DIR sets the venv up from that local wheel directory
# (pip --no-index; fill it with `python3 scripts/gpu_check.py wheels DIR`), for a host without network; STEP_TIMEOUT=S
# bounds each command (default 3600 s). record-gpu-check keeps the last report as bench/gpu-check.json, which
# README.md and docs/testing.md quote (make docs).
WHEELS ?=
STEP_TIMEOUT ?=
gpu-check:
	@python3 scripts/gpu_check.py $(if $(WHEELS),--wheels $(WHEELS)) $(if $(STEP_TIMEOUT),--step-timeout $(STEP_TIMEOUT))

record-gpu-check: venv
	@$(VENV)/bin/python bench/figures.py record-gpu-check build/gpu-check/report.json
	@$(VENV)/bin/python scripts/gen-role-docs

# gpuops-run and validate.yml against the demo node (started if absent; under the demo's lock).
ops-test: setup
	@scripts/run-tests.sh ops

# tests/bad_input: every bad-input case refused before any change, on one Debian 12 container.
bad-input-test: setup
	@scripts/run-tests.sh bad_input

# tests/dnf: _pinned_packages' dnf path (versionlock) for real, on a Debian 12 container with Debian's dnf and rpm
# (a labelled stand-in for a RHEL host's package manager) and a signed RPM repository built in it.
dnf-test: setup
	@scripts/run-tests.sh dnf

# tests/site_check: site.yml --check on inventories/cluster against four Debian 13 containers.
site-check-test: setup
	@scripts/run-tests.sh site_check

molecule: setup
	@scripts/run-tests.sh molecule $(SCENARIO)

test: host venv
	@scripts/run-tests.sh all

demo: setup
	@scripts/demo.sh

demo-clean: host
	@scripts/demo.sh --destroy

# make bench [BENCH_SIZES=10,50,100] [BENCH_ROUNDS=3]: parser micro-benchmarks, preflight against ping and setup on
# N container hosts, and site.yml's converge + idempotent re-run on the demo node. Ratios, never pass/fail.
BENCH_SIZES ?= 10,50,100
BENCH_ROUNDS ?= 3
bench: venv images
	@$(VENV)/bin/python bench/run.py
	@$(VENV)/bin/python bench/fleet.py --sizes $(BENCH_SIZES) --rounds $(BENCH_ROUNDS)
	@$(VENV)/bin/python bench/converge.py --rounds $(BENCH_ROUNDS)

clean:
	rm -rf build reports .cache .pytest_cache .ruff_cache
