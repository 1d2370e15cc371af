# One entry point for every developer task. `make help` lists them.
SHELL := /bin/bash
CARGO ?= cargo
# The container image: podman, runc (crun cannot run containers on hybrid cgroups), skopeo, and
# iptables for published ports (netavark, podman's network stack, does not depend on it).
APT_PACKAGES := protobuf-compiler python3-venv chromium podman runc skopeo iptables wrk openssl
VENV ?= .venv
PY := $(VENV)/bin/python
TOOLS ?= .tools
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
IMAGE := target/image/oxray-$(VERSION)-oci.tar
# What ships (the wheel, the bundle, the image) is linked by zig against the oldest glibc it
# supports, so it runs on every Linux since (deploy/dist/GLIBC_FLOOR); benchmarks use the
# plain release build.
GLIBC_FLOOR := $(shell cat deploy/dist/GLIBC_FLOOR)
PORTABLE_TARGET := $(shell uname -m)-unknown-linux-gnu
# Its own target directory: the wheel's zig build sets other compiler variables, and sharing
# one directory would make each build redo the other's.
PORTABLE_DIR := target/portable
PORTABLE_BIN := $(PORTABLE_DIR)/$(PORTABLE_TARGET)/release/oxray
ZIG_ENV := PATH=$(abspath $(TOOLS))/cargo/bin:$$PATH CARGO_ZIGBUILD_PYTHON_PATH=$(abspath $(TOOLS))/venv/bin/python
# The image's org.opencontainers.image.source label, e.g. the repository's URL.
IMAGE_SOURCE ?=

.PHONY: help setup venv wheel build release portable tools test test-rust test-python test-api test-ui test-deploy test-k8s test-dist dist crds lint fmt bench bench-train bench-data bench-tune bench-serve bench-state bench-reporting chaos demo clean helm-tools lint-helm image podman-setup test-image bench-image

help:
	@echo "make setup    install the Debian packages the build and tests need ($(APT_PACKAGES), node/npm if missing)"
	@echo "make build    debug build of the workspace"
	@echo "make release  optimized oxray binary in target/release/oxray (for benchmarks)"
	@echo "make portable the binary that ships, for glibc $(GLIBC_FLOOR) and newer, in $(PORTABLE_BIN)"
	@echo "make venv     Python venv in $(VENV): the oxray package, pytest, Ray (client, Train), torch for the training tests"
	@echo "make test     every test: Rust (unit, component, real processes), Python client, Ray-client compatibility, Helm charts"
	@echo "make lint     rustfmt check and clippy with warnings as errors"
	@echo "make crds     regenerate deploy/helm/oxray-operator/crds from the operator's Rust types"
	@echo "make dist     offline bundle target/dist/oxray-<version>-linux-<arch>.tar.gz: binary, wheels, install.sh"
	@echo "make image    container image $(IMAGE) (OCI, no engine needed), loaded into podman or docker when present"
	@echo "make tools    Helm 4 and 3, kubernetes-validate, check-jsonschema, zig, cargo-zigbuild, schemathesis, cached in $(TOOLS)"
	@echo "make test-api     the HTTP API from outside: OpenAPI document, schemathesis fuzz, wrk flood"
	@echo "make lint-helm    helm lint and template of deploy/helm with both Helms, rendered manifests validated offline"
	@echo "make test-deploy  lint-helm, then the chart tests in tests/deploy"
	@echo "make test-image   the image: config, size, reproducible, a head in a container and a job submitted from outside"
	@echo "make test-k8s     the operator end to end on a fake API server and a process kubelet (root: mount namespaces)"
	@echo "make wheel    the oxray Python wheel (abi3, binary included) in target/wheels"
	@echo "make bench    benchmarks under bench/, side by side with Ray when installed"
	@echo "make bench-train  DDP training: torchrun, oxray TorchTrainer and Ray TorchTrainer side by side"
	@echo "make bench-data   data ingest: oxray.data and Ray Data side by side"
	@echo "make bench-tune   hyperparameter search: oxray.tune and Ray Tune side by side (trivial, Optuna, start latency, fast reports)"
	@echo "make bench-serve  HTTP serving: uvicorn+FastAPI, oxray Serve and Ray Serve side by side"
	@echo "make bench-state  the head's memory over 100k short tasks, beside Ray's GCS"
	@echo "make bench-reporting  the fastest call rows with task state reporting on and off"
	@echo "make bench-image  the image's size and its parts, beside Ray's published image sizes"
	@echo "make chaos    a 10-minute chaos soak: mixed work while workers, agents and the head are SIGKILLed"
	@echo "make demo     start a local cluster, use it, stop it"

setup:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v node >/dev/null && command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo is missing: install Rust from https://rustup.rs"; exit 1; }

# The venv is rebuilt when its inputs change. The oxray package is installed editable and its
# native module (maturin, dev profile: it shares the workspace's build) rebuilt on every run.
$(VENV)/.ready: python/requirements-compat.txt python/requirements-train.txt python/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r python/requirements-compat.txt -r python/requirements-train.txt
	touch $@

venv: setup $(VENV)/.ready
	MATURIN_PEP517_ARGS="--profile dev" $(PY) -m pip install -q --disable-pip-version-check -e ./python

# A release wheel (abi3: any CPython >= 3.9) with the portable binary inside, in target/wheels,
# its native module linked by zig for the same glibc and tagged so; maturin checks the symbols.
wheel: portable venv
	rm -f target/wheels/oxray-*.whl
	mkdir -p python/oxray/_bin && cp $(PORTABLE_BIN) python/oxray/_bin/oxray
	$(ZIG_ENV) MATURIN_PEP517_ARGS="--zig --compatibility manylinux_$(subst .,_,$(GLIBC_FLOOR))" \
	  $(VENV)/bin/pip wheel -q --no-deps -w target/wheels ./python
	rm -rf python/oxray/_bin

build: setup
	$(CARGO) build --workspace --all-targets

release: setup
	$(CARGO) build --release -p oxray-cli

# The binary that ships is linked whole (fat LTO, one codegen unit): 7 MB smaller (36.7 ->
# 29.9 MB stripped), which keeps the image under 100 MB, for about 4 more minutes of build.
portable: setup tools
	$(ZIG_ENV) CARGO_TARGET_DIR=$(PORTABLE_DIR) CARGO_PROFILE_RELEASE_LTO=fat CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
	  $(CARGO) zigbuild --release -p oxray-cli --target $(PORTABLE_TARGET).$(GLIBC_FLOOR)

test: test-rust test-python test-api test-ui test-deploy test-k8s test-dist test-image

test-rust: setup
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
	  $(CARGO) nextest run --workspace --no-fail-fast; \
	else \
	  $(CARGO) test --workspace --no-fail-fast; \
	fi

# Two pytest runs: Ray's client reads its auth settings once per process.
test-python: venv
	$(CARGO) build -p oxray-cli
	OXRAY_BIN=$(CURDIR)/target/debug/oxray $(PY) -m pytest python/tests -q
	OXRAY_BIN=$(CURDIR)/target/debug/oxray $(PY) -m pytest tests/compat -q

# The HTTP API from outside: its OpenAPI document, a bounded schemathesis run, a wrk flood.
test-api: setup tools
	$(CARGO) build -p oxray-cli
	OXRAY_BIN=$(CURDIR)/target/debug/oxray OXRAY_TOOLS_DIR=$(abspath $(TOOLS)) $(abspath $(TOOLS))/venv/bin/python -m pytest tests/api -q

# The dashboard in Debian's Chromium, driven by playwright-core (no browser download). Its
# workloads are jobs whose drivers run in the venv's Python; the venv is made when it has no oxray.
ui/node_modules/.package-lock.json: ui/package.json ui/package-lock.json
	cd ui && npm ci --no-audit --no-fund --silent

test-ui: setup ui/node_modules/.package-lock.json
	@$(PY) -c "import oxray" 2>/dev/null || $(MAKE) venv
	$(CARGO) build -p oxray-cli
	cd ui && OXRAY_BIN=$(CURDIR)/target/debug/oxray node --test tests/

# The Helm charts under deploy/helm. Their tools come from npm and PyPI (Helm has no package on
# either but AWS CDK's kubectl layers, which carry its binary) into the ignored $(TOOLS); a second
# run downloads nothing.
tools: setup
	OXRAY_TOOLS_DIR=$(abspath $(TOOLS)) bash deploy/tools.sh

helm-tools: tools

lint-helm: tools
	OXRAY_TOOLS_DIR=$(abspath $(TOOLS)) bash deploy/helm/ci/lint.sh

test-deploy: lint-helm
	OXRAY_TOOLS_DIR=$(abspath $(TOOLS)) $(abspath $(TOOLS))/venv/bin/python -m pytest tests/deploy -q

# Everything a machine with no network needs; the bundle's test installs it under `unshare -n`.
dist: wheel
	PY=$(PY) BIN=$(PORTABLE_BIN) bash deploy/dist/build.sh

test-dist: dist tools
	$(PY) -m pytest tests/dist -q

# The container image, put together from Debian debs, the wheel and the binary by a Python script
# (no engine, no base image to pull: no registry is reachable in CI); deploy/image/README.md.
image: wheel podman-setup
	$(PY) deploy/image/build.py --wheel $$(ls target/wheels/oxray-$(VERSION)-cp39-abi3-*.whl | head -n1) \
	  --binary $(PORTABLE_BIN) --source "$(IMAGE_SOURCE)" --load auto

# Podman on machines like CI's needs runc and lower ulimits (deploy/image/containers.conf).
podman-setup: setup
	@if command -v podman >/dev/null && [ ! -e /etc/containers/containers.conf ] && [ "$$(id -u)" = 0 ]; then \
	  nofile=$$(ulimit -Hn); [ "$$nofile" = unlimited ] && nofile=1048576; \
	  mkdir -p /etc/containers; \
	  sed "s/@NOFILE@/$$nofile/g" deploy/image/containers.conf > /etc/containers/containers.conf; \
	  echo "wrote /etc/containers/containers.conf (runc, nofile=$$nofile)"; \
	fi

test-image: image
	OXRAY_IMAGE=$(CURDIR)/$(IMAGE) OXRAY_BIN=$(CURDIR)/$(PORTABLE_BIN) $(PY) -m pytest tests/deploy/test_image.py -q

bench-image: image
	$(PY) bench/image_size.py $(IMAGE)

# The CRDs are generated from the Rust types; a test fails when the committed copy is stale.
crds:
	$(CARGO) run -q -p oxray-cli -- operator crd > deploy/helm/oxray-operator/crds/oxray-crds.yaml

# No Kubernetes can run here: tests/k8s/fakekube is an API server and a kubelet that runs each
# pod as local processes; kubectl (preinstalled) and the operator talk to it as to a real one.
test-k8s: venv tools
	$(CARGO) build -p oxray-cli
	OXRAY_BIN=$(CURDIR)/target/debug/oxray $(PY) -m pytest tests/k8s -q

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 scripts/house_measures.py
	cd scripts && python3 -m unittest -q test_house_measures

fmt:
	$(CARGO) fmt --all

# Benchmarks measure the release build: the binary and the native module both.
bench: release setup $(VENV)/.ready
	MATURIN_PEP517_ARGS="--profile release" $(PY) -m pip install -q --disable-pip-version-check -e ./python
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH python3 bench/cluster_start.py
	python3 bench/job_submit.py --venv $(VENV)
	$(PY) bench/init.py
	OXRAY_BIN=$(CURDIR)/target/release/oxray $(PY) bench/microbenchmark.py --ray

# DDP training by torchrun, oxray's TorchTrainer and Ray's, side by side (a few minutes).
bench-train: release setup $(VENV)/.ready
	MATURIN_PEP517_ARGS="--profile release" $(PY) -m pip install -q --disable-pip-version-check -e ./python
	OXRAY_BIN=$(CURDIR)/target/release/oxray $(PY) bench/train.py

# Data ingest: oxray.data and Ray Data side by side (a few minutes).
bench-data: release setup $(VENV)/.ready
	MATURIN_PEP517_ARGS="--profile release" $(PY) -m pip install -q --disable-pip-version-check -e ./python
	OXRAY_BIN=$(CURDIR)/target/release/oxray $(PY) bench/data.py --ray

# Hyperparameter search: oxray.tune and Ray Tune side by side (Ray's side takes ~10 minutes).
bench-tune: release setup $(VENV)/.ready
	MATURIN_PEP517_ARGS="--profile release" $(PY) -m pip install -q --disable-pip-version-check -e ./python
	OXRAY_BIN=$(CURDIR)/target/release/oxray $(PY) bench/tune.py

# HTTP serving: bare uvicorn+FastAPI, oxray Serve and Ray Serve, side by side (a few minutes).
bench-serve: release setup $(VENV)/.ready
	MATURIN_PEP517_ARGS="--profile release" $(PY) -m pip install -q --disable-pip-version-check -e ./python
	OXRAY_BIN=$(CURDIR)/target/release/oxray $(PY) bench/serve.py

# The memory of the task state keeper (oxray's head, Ray's GCS) over 100k short tasks (minutes).
bench-state: release setup $(VENV)/.ready
	MATURIN_PEP517_ARGS="--profile release" $(PY) -m pip install -q --disable-pip-version-check -e ./python
	OXRAY_BIN=$(CURDIR)/target/release/oxray $(PY) bench/state_memory.py --ray

# AGAINST=DIR adds a column for another built checkout (see bench/reporting_cost.py).
bench-reporting: release setup $(VENV)/.ready
	MATURIN_PEP517_ARGS="--profile release" $(PY) -m pip install -q --disable-pip-version-check -e ./python
	OXRAY_BIN=$(CURDIR)/target/release/oxray $(PY) bench/reporting_cost.py --rounds 8 $(if $(AGAINST),--against $(AGAINST))

# Ten minutes of mixed work while workers, agents and the head are killed (CI runs 45 s of it).
chaos: release setup $(VENV)/.ready
	MATURIN_PEP517_ARGS="--profile release" $(PY) -m pip install -q --disable-pip-version-check -e ./python
	OXRAY_BIN=$(CURDIR)/target/release/oxray $(PY) bench/chaos.py --duration 600

demo: release venv
	bash scripts/demo.sh target/release/oxray $(PY)

clean:
	$(CARGO) clean
