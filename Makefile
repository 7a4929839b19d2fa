# sparkbench — make targets.
#
#   make setup   .venv from requirements.txt, a Docker engine (Debian's docker.io when none answers),
#                the Debian base image, the simulator images, headless Chromium (report tests) and
#                Debian's openssh-server and sudo (the SSH test units; no system sshd is started).
#                Idempotent: seconds when done.
#   make check   ruff, lint-imports (the layers) and the unit layer (no Docker, no server): seconds.
#   make test    setup + the whole suite (pytest, ruff, ansible-lint, Molecule). What CI runs.
#   make fixtures  re-records, from the real parts, the documents the unit layer reads
#                (tests/fixtures/recorded/: real vLLM's failures that take a whole engine start).
#   make demo    the seed's matrix on one simulated Spark first (its table within minutes), then
#                quality/image, the fleet and its health, the v0.24 -> v0.25 bridge, two Sparks
#                over Ray and real vLLM (CPU). Sets up only what its first step needs (demo-setup);
#                a later step builds the image it needs when it first runs.
#   make perf    benchmarks of sparkbench itself (perf/); rewrites BENCHMARKS.md.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
SIM_VERSION ?= 0.25.0
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Python keeps the byte code of what it imports (__pycache__): with PYTHONDONTWRITEBYTECODE set in
# the environment every ansible-playbook, report render and CLI call compiled its imports again
# (about 1.5 CPU-s per playbook run, 1.3 per matplotlib import on 2 cores).
unexport PYTHONDONTWRITEBYTECODE
# Molecule and ansible-lint must never try to reach Galaxy.
export ANSIBLE_GALAXY_DISABLE_GPG_VERIFY := 1

.PHONY: help setup venv venv-runtime docker sim-images images chromium ssh-units demo-setup check test pytest lint \
        molecule fixtures demo perf clean

help:
	@sed -n '3,16p' Makefile | sed 's/^# \{0,1\}//'

setup: venv docker images chromium ssh-units

venv: $(VENV)/.installed $(VENV)/.zipcache
# What sparkbench itself runs on (requirements.txt above its tests-and-lint line) and the package:
# all make demo needs. --no-compile: Python compiles what it imports when it first imports it
# (installing the Ansible bundle's byte code alone took minutes here) and keeps the byte code, since
# PYTHONDONTWRITEBYTECODE is unexported below.
venv-runtime: $(VENV)/.installed-runtime $(VENV)/.zipcache

# Ansible's module runs on simulated units import ansible.module_utils from a zip with no byte code;
# sparkbench.zipcache keeps it (about a third of each module run's CPU).
$(VENV)/.zipcache: $(VENV)/.installed-runtime sparkbench/zipcache.py
	@$(VPY) -m sparkbench.zipcache
	@touch $@

$(VENV)/.installed-runtime: requirements.txt pyproject.toml
	@test -x $(VPY) || { scripts/setup_python.sh $(PYTHON) && $(PYTHON) -m venv $(VENV); }
	@echo "setup: installing sparkbench's runtime packages into $(VENV) (first time: 1-3 minutes)"
	@sed '/^# --- tests and lint/,$$d' requirements.txt > $(VENV)/requirements-runtime.txt
	@$(VPY) -m pip install -q --no-compile --disable-pip-version-check -r $(VENV)/requirements-runtime.txt
	@# The sparkbench package (editable: the plugins, reports and runner import the working tree).
	@$(VPY) -m pip install -q --no-compile --disable-pip-version-check --no-deps -e .
	@touch $@

$(VENV)/.installed: $(VENV)/.installed-runtime requirements.txt
	@echo "setup: installing the test and lint packages into $(VENV) (first time: a few minutes)"
	@$(VPY) -m pip install -q --no-compile --disable-pip-version-check -r requirements.txt
	@touch $@

docker:
	@scripts/setup_docker_engine.sh

# The images make demo's first step needs: the Debian base and the simulator (v0.25.0, v0.24.0).
sim-images: docker
	@scripts/build_base_image.sh
	@scripts/build_sim_image.sh $(SIM_VERSION)

images: sim-images
	@scripts/build_sim_ray_image.sh
	@scripts/build_vllm_cpu_image.sh

chromium:
	@scripts/setup_chromium.sh

ssh-units:
	@scripts/setup_ssh_units.sh

test: setup
	@$(MAKE) --no-print-directory pytest lint molecule

# The developer's inner loop: ruff, the import layers and the unit layer on two workers (no subprocess, server or
# Docker: tests/conftest.py fails a unit test that starts one).
check: venv
	ruff check .
	lint-imports --no-cache --no-logo
	$(VPY) -m pytest -q -m unit -n 2 -p no:cacheprovider tests

# Workers: pytest runs on four pytest-xdist workers, a file (or a group in tests/conftest.py that
# shares a server) on one worker; on 2 cores the suite is CPU-bound, so four keep both cores busy
# while the paced simulators wait. PYTEST_WORKERS=0 runs it in one process (the long groups first).
PYTEST_WORKERS ?= 4
pytest:
	SPARKBENCH_SKIP_IS_FAILURE=1 $(VPY) -m pytest -q -ra -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=15 tests

# The real-vLLM bench.yml run with the failures that take a whole engine start each (a missing
# model, a --max-model-len beyond the KV cache, an engine that dies on its first request): their
# documents go to tests/fixtures/recorded/real-vllm/, then the unit tests that read them run.
fixtures: setup
	SPARKBENCH_RECORD_FIXTURES=1 $(VPY) -m pytest -q -p no:cacheprovider tests/test_real_vllm_e2e.py
	$(VPY) -m pytest -q -p no:cacheprovider tests/test_recorded_failures.py

lint:
	ruff check .
	lint-imports --no-cache --no-logo
	ansible-lint --offline

molecule:
	@for s in $$(ls molecule); do \
	  echo "molecule: scenario $$s"; \
	  molecule test -s $$s; \
	done

# make demo's own setup: the runtime venv beside the engine and the simulator images (two jobs).
# The Ray and real-vLLM images are built by the demo (sparkbench/demo/) before the step that needs them;
# Chromium and the SSH units are for make test only.
demo-setup:
	@$(MAKE) --no-print-directory -j2 venv-runtime sim-images

demo: demo-setup
	@$(VPY) -m sparkbench.demo

perf: setup
	$(VPY) -m perf.run_all

clean:
	rm -rf $(VENV) .pytest_cache
