#!/usr/bin/env bash
# The offline bundle: target/dist/oxray-<version>-linux-<arch>.tar.gz with the binary, the
# wheel, the wheels it depends on for every CPython it supports, and install.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PY:-.venv/bin/python}
floor=$(cat deploy/dist/GLIBC_FLOOR)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
arch=$(uname -m)
name=oxray-$version-linux-$arch
stage=target/dist/$name
wheel=$(ls target/wheels/oxray-"$version"-cp39-abi3-*.whl | head -n1)

rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/wheels"
strip -o "$stage/bin/oxray" "${BIN:-target/release/oxray}"
python3 deploy/dist/glibc_floor.py --max "$floor" "$stage/bin/oxray"
cp "$wheel" "$stage/wheels/"
# The package's own dependencies, as wheels for each CPython the abi3 wheel runs on.
for v in 3.9 3.10 3.11 3.12 3.13; do
    "$py" -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$v" \
        --platform manylinux2014_"$arch" --platform manylinux_2_17_"$arch" --platform any \
        -d "$stage/wheels" "websockets>=10" "cloudpickle>=2"
done
cp deploy/dist/install.sh deploy/dist/GLIBC_FLOOR "$stage/"
cat > "$stage/README" <<TEXT
oxray $version for Linux $arch (glibc $floor or newer), installable with no network.

  ./install.sh --venv ~/oxray-venv     the binary, and the Python package in a new venv
  ./install.sh --help                  other ways

Then: oxray start --head
TEXT
# Reproducible: fixed owners and times, sorted names.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C target/dist -czf "target/dist/$name.tar.gz" "$name"
ls -l "target/dist/$name.tar.gz"
