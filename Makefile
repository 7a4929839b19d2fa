# sparkbench — make targets.
#
#   make setup   .venv from requirements.txt, a Docker engine (Debian's docker.io when none answers),
#                the Debian base image, the simulator images, headless Chromium (report tests) and
#                Debian's openssh-server and sudo (the SSH test units; no system sshd is started).
#                Idempotent: seconds when done.
#   make test    setup + the whole suite (pytest, ruff, ansible-lint, Molecule). What CI runs.
#   make demo    the full seed matrix on the simulated Spark fleet: tables, report.html, charts,
#                and a simulated v0.24 -> v0.25 version bridge.
#   make bench   benchmarks of sparkbench itself; rewrites BENCHMARKS.md.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
SIM_VERSION ?= 0.25.0
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Molecule and ansible-lint must never try to reach Galaxy.
export ANSIBLE_GALAXY_DISABLE_GPG_VERIFY := 1

.PHONY: help setup venv docker images chromium ssh-units test pytest lint molecule demo bench clean

help:
	@sed -n '3,11p' Makefile | sed 's/^# \{0,1\}//'

setup: venv docker images chromium ssh-units

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@echo "setup: installing Python packages into $(VENV) (first time: a few minutes)"
	@$(VPY) -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
	@$(VPY) -m pip install -q --disable-pip-version-check -r requirements.txt
	@# The sparkbench package (editable: the plugins, reports and runner import the working tree).
	@$(VPY) -m pip install -q --disable-pip-version-check --no-deps -e .
	@touch $@

docker:
	@scripts/setup_docker_engine.sh

images: docker
	@scripts/build_base_image.sh
	@scripts/build_sim_image.sh $(SIM_VERSION)
	@scripts/build_sim_ray_image.sh
	@scripts/build_vllm_cpu_image.sh

chromium:
	@scripts/setup_chromium.sh

ssh-units:
	@scripts/setup_ssh_units.sh

test: setup
	@$(MAKE) --no-print-directory pytest lint molecule

pytest:
	$(VPY) -m pytest -q -ra tests

lint:
	ruff check .
	ansible-lint --offline

molecule:
	@for s in $$(ls molecule); do \
	  echo "molecule: scenario $$s"; \
	  molecule test -s $$s; \
	done

demo: setup
	@$(VPY) scripts/demo.py

bench: setup
	$(VPY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache
