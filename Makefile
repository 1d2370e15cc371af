# One entry point for every developer task. `make help` lists them.
SHELL := /bin/bash
CARGO ?= cargo
APT_PACKAGES := protobuf-compiler

.PHONY: help setup build release test lint fmt bench demo clean

help:
	@echo "make setup    install system packages the build needs (Debian: $(APT_PACKAGES))"
	@echo "make build    debug build of the workspace"
	@echo "make release  optimized oxray binary in target/release/oxray"
	@echo "make test     every test (unit, component, real-process end-to-end)"
	@echo "make lint     rustfmt check and clippy with warnings as errors"
	@echo "make bench    benchmarks under bench/, side by side with Ray when installed"
	@echo "make demo     start a local cluster, use it, stop it"

setup:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo is missing: install Rust from https://rustup.rs"; exit 1; }

build: setup
	$(CARGO) build --workspace --all-targets

release: setup
	$(CARGO) build --release -p oxray-cli

test: setup
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
	  $(CARGO) nextest run --workspace --no-fail-fast; \
	else \
	  $(CARGO) test --workspace --no-fail-fast; \
	fi

lint: setup
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

bench: release
	python3 bench/cluster_start.py

demo: release
	bash scripts/demo.sh target/release/oxray

clean:
	$(CARGO) clean
