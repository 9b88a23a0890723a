# modelops.vllm -- developer and CI entry points.
#
#   make test   create .venv if needed, then run every test tier
#   make demo   run the demo (scripts/demo.py)
#
# Everything else is a building block of those two; `make help` lists them.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed
REQUIREMENTS := requirements/test.txt requirements/constraints.txt requirements/collection.txt
# `make demo` needs only ansible-core, requests and py-spy (requirements/demo.txt), not the test stack.
DEMO_STAMP := $(VENV)/.demo-installed
DEMO_REQUIREMENTS := requirements/demo.txt requirements/constraints.txt requirements/collection.txt

# The collection, importable as ansible_collections.modelops.vllm, through a
# symlink to this work tree (used by pytest, ansible-playbook, the demo).
NAMESPACE := $(shell sed -n 's/^namespace:[[:space:]]*//p' galaxy.yml)
NAME := $(shell sed -n 's/^name:[[:space:]]*//p' galaxy.yml)
COLLECTIONS_DIR := $(CURDIR)/.cache/collections
COLLECTION_LINK := $(COLLECTIONS_DIR)/ansible_collections/$(NAMESPACE)/$(NAME)

export PATH := $(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS_DIR)

# pip on these machines warns once per package about a missing local index
# directory; keep the log readable.
PIP_NOISE := is ignored: it is neither a file nor a directory

# `make test` (scripts/run-tiers.sh): fast, self-contained tiers first, one after the other, and molecule in a lane of
# its own beside them ("+" starts a lane): its scenarios mostly wait on check intervals (both cores 52 % busy
# alone), as sanity does on one core (53 %). Not the integration tier beside the others: tried 2026-12-03, both
# cores were 100 % busy, lint took 254 s instead of 73 and unit 276 s instead of 95, and the real vLLM engines
# (nice 19) waited on everything else. The version tier runs molecule after the molecule tier (one lock).
TIERS := lint unit build sanity versions integration + molecule
# `make check`, the developer's inner loop: these at once.
CHECK_TIERS := lint unit sanity smoke

# pytest-xdist workers of the pytest tiers (0: one process). The unit tier's tests mostly compute; the integration
# tier's mostly wait (check intervals, servers starting), side by side in the groups of tests/support/groups.py.
UNIT_WORKERS ?= 3
INTEGRATION_WORKERS ?= 4
xdist = $(if $(filter-out 0,$(1)),-n $(1) $(2))

.PHONY: help venv lock lock-versions collection-link packages lint sanity unit integration molecule smoke versions build test check demo try try-stop clean distclean

help:
	@echo 'User-facing:'
	@echo '  make test         create .venv (first run only) and run every tier: $(TIERS)'
	@echo '  make check        the developer loop, about 5 minutes: $(CHECK_TIERS) at once (output in .cache/tiers/)'
	@echo '  make demo         run the demo (scripts/demo.py) in .venv (which it makes with requirements/demo.txt only)'
	@echo '  make try          leave a sandbox running (simulated vLLM servers on 127.0.0.1:28000-28099, an inventory,'
	@echo '                    stand-ins): every command of the docs runs against it; prints the line to source'
	@echo '  make try-stop     stop the sandbox and remove its own files from $(TRY_DIR) (yours stay)'
	@echo 'Tiers (each creates .venv first if needed):'
	@echo '  make lint         ansible-lint (production profile) + antsibull-changelog lint'
	@echo '  make unit         pytest tests/unit'
	@echo '  make build        ansible-galaxy collection build + install into a temp path + ansible-doc $(NAMESPACE).$(NAME).health'
	@echo '  make sanity       ansible-test sanity --venv --python 3.11 on a staged copy (scripts/ansible-test-sanity.sh)'
	@echo '  make molecule     molecule test --all, if there are molecule scenarios'
	@echo '  make smoke        molecule test -s stuck: the role restarts a hung server end to end (part of make check)'
	@echo '  make versions     both ends of the ansible-core range, each in its own venv under .cache/versions/'
	@echo '                    (scripts/versions-tier.sh): 2.16 on Python 3.11 and 2.21 on Python 3.12 (sanity, unit),'
	@echo '                    molecule fleet + stuck on 2.16 and on 2.21 with INJECT_FACTS_AS_VARS=False; an Ansible warning fails it'
	@echo '  make integration  pytest tests/integration (real vLLM; the harness installs it)'
	@echo 'Maintenance:'
	@echo '  make venv         create/refresh .venv from requirements/'
	@echo '  make lock         re-resolve requirements/test.txt into requirements/constraints.txt'
	@echo '  make lock-versions  re-resolve requirements/versions/*.txt into their .lock files'
	@echo '  make clean        remove build output and caches (keeps .venv)'
	@echo '  make distclean    clean + remove .venv'

# ---------------------------------------------------------------- environment

venv: $(STAMP)

$(STAMP): $(REQUIREMENTS)
	@command -v $(PYTHON) >/dev/null || { echo "ERROR: $(PYTHON) not found (set PYTHON=/path/to/python3.11)"; exit 1; }
	@if [ ! -x $(VENV)/bin/python ]; then echo "venv: creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); fi
	@echo "venv: installing requirements/test.txt"
	@$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/test.txt 2>&1 | { grep -v '$(PIP_NOISE)' || true; }
	@$(VENV)/bin/python -m pip check
	@touch $@

# The demo's part of .venv: ansible-core, requests, py-spy (with the full test stack in place, nothing to add).
$(DEMO_STAMP): $(DEMO_REQUIREMENTS)
	@command -v $(PYTHON) >/dev/null || { echo "ERROR: $(PYTHON) not found (set PYTHON=/path/to/python3.11)"; exit 1; }
	@if [ ! -x $(VENV)/bin/python ]; then echo "venv: creating $(VENV) with $$($(PYTHON) --version)"; $(PYTHON) -m venv $(VENV); fi
	@echo "venv: installing requirements/demo.txt (ansible-core, requests, py-spy)"
	@$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/demo.txt 2>&1 | { grep -v '$(PIP_NOISE)' || true; }
	@$(VENV)/bin/python -m pip check
	@touch $@

# Re-resolve the top-level pins of requirements/test.txt into a full lock.
lock:
	rm -rf .cache/lock-venv
	$(PYTHON) -m venv .cache/lock-venv
	echo '# placeholder while re-locking' > requirements/constraints.txt
	.cache/lock-venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/test.txt 2>&1 | { grep -v '$(PIP_NOISE)' || true; }
	{ echo '# Full lock of requirements/test.txt for Python 3.11 (generated by `make lock`; do not edit).'; \
	  .cache/lock-venv/bin/python -m pip freeze --all --exclude pip --exclude setuptools --exclude wheel | LC_ALL=C sort -f; } > requirements/constraints.txt.new
	mv requirements/constraints.txt.new requirements/constraints.txt
	rm -rf .cache/lock-venv
	@echo "lock: requirements/constraints.txt rewritten; run 'make venv'"

lock-versions:
	scripts/versions-tier.sh --lock $(patsubst requirements/versions/%.txt,%,$(wildcard requirements/versions/*.txt))

collection-link:
	@mkdir -p $(dir $(COLLECTION_LINK))
	@if [ "$$(readlink $(COLLECTION_LINK) 2>/dev/null)" != "$(CURDIR)" ]; then rm -rf $(COLLECTION_LINK); ln -s $(CURDIR) $(COLLECTION_LINK); fi

# ---------------------------------------------------------------------- tiers

lint: $(STAMP) collection-link
	@echo '== lint: ansible-lint'
	ansible-lint --offline $(if $(CI),--nocolor)
	@echo '== lint: antsibull-changelog lint'
	antsibull-changelog lint
	@if [ -f changelogs/changelog.yaml ]; then set -x; antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml; fi

unit: $(STAMP) collection-link
	@echo '== unit: pytest tests/unit'
	scripts/pytest-tier.sh unit tests/unit $(call xdist,$(UNIT_WORKERS))

integration: $(STAMP) collection-link packages
	@echo '== integration: pytest tests/integration'
	scripts/pytest-tier.sh integration tests/integration $(call xdist,$(INTEGRATION_WORKERS),--dist loadgroup --no-loadscope-reorder)

sanity: $(STAMP)
	@echo '== sanity: ansible-test sanity'
	ANSIBLE_TEST=$(BIN)/ansible-test scripts/ansible-test-sanity.sh $(SANITY_ARGS)

molecule: $(STAMP) collection-link
	@echo '== molecule'
	scripts/molecule-tier.sh

# ansible-core 2.16 and 2.21 (the ends of the tested range) in venvs of their own; VERSIONS_ARGS=core-2.16 runs one.
versions: collection-link
	@echo '== versions: ansible-core 2.16 and 2.21 (scripts/versions-tier.sh)'
	UNIT_WORKERS=$(UNIT_WORKERS) scripts/versions-tier.sh $(VERSIONS_ARGS)

build: $(STAMP)
	@echo '== build: ansible-galaxy collection build / install / ansible-doc'
	scripts/build-collection.sh

smoke: $(STAMP) collection-link
	@echo '== smoke: molecule test -s stuck'
	molecule test -s stuck

# ------------------------------------------------------------ user commands

# The Debian packages the integration tier uses.
packages:
	scripts/ensure-nginx.sh
	scripts/ensure-prometheus.sh
	scripts/ensure-eda.sh
	scripts/ensure-sshd.sh
	scripts/ensure-tools.sh

test: $(STAMP) collection-link
	scripts/run-tiers.sh $(TIERS)

# Not what CI runs: a quick look before a commit (`make test` is all of it).
check: $(STAMP) collection-link
	MAKE_GOAL_NAME=check PARALLEL=1 scripts/run-tiers.sh $(CHECK_TIERS)

demo: $(DEMO_STAMP) collection-link
	scripts/ensure-nginx.sh
	@if [ ! -f scripts/demo.py ]; then echo "demo: scripts/demo.py does not exist yet"; exit 1; fi
	$(BIN)/python scripts/demo.py $(DEMO_ARGS)

# The sandbox (scripts/try.py): it runs on after `make try` returns, until `make try-stop`.
TRY_DIR ?= .cache/try

try: $(STAMP) collection-link
	@scripts/ensure-nginx.sh >/dev/null || echo "try: nginx could not be installed: the sandbox has no proxy"
	@scripts/ensure-tools.sh jq >/dev/null || echo "try: jq could not be installed: docs/schedule.md's history commands need it"
	@scripts/ensure-prometheus.sh >/dev/null || echo "try: promtool could not be installed: docs/prometheus.md's commands need it"
	@$(BIN)/python scripts/try.py start --dir $(TRY_DIR) $(TRY_ARGS)

try-stop:
	@$(if $(wildcard $(BIN)/python),$(BIN)/python,python3) scripts/try.py stop --dir $(TRY_DIR)

# ------------------------------------------------------------------ cleanup

clean:
	rm -rf build .cache/sanity .cache/build .cache/collections tests/output .pytest_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .cache
