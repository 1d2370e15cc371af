#!/usr/bin/env python3
"""The container image's size, uncompressed (what it takes on a node) and compressed (what a
pull downloads), what it is made of, and Ray's images beside it. Ray's figures are the published
ones users quote, not measured here: no registry is reachable from CI.

Usage: bench/image_size.py [target/image/oxray-<version>-oci.tar]   (make bench-image)
Target: under 100 MB uncompressed.
"""

import gzip
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = 100_000_000
# Published, uncompressed: rayproject/ray on Docker Hub, as users report it.
RAY = [
    ("rayproject/ray:2.x (CPU)", 2.2e9),
    ("rayproject/ray:2.x-gpu (CUDA)", 5.2e9),
]
SITE = "usr/lib/python3/dist-packages/"

# What each file of the image is, first match wins.
PARTS = [
    ("oxray binary (/usr/bin/oxray, stripped)", lambda n: n == "usr/bin/oxray"),
    ("oxray package: native module", lambda n: n.startswith(SITE + "oxray/") and n.endswith(".so")),
    ("oxray package: Python, .pyc, metadata", lambda n: n.startswith(SITE + "oxray")),
    ("websockets, cloudpickle", lambda n: n.startswith(SITE)),
    ("CPython 3.11: interpreter", lambda n: n.startswith("usr/bin/python")),
    ("CPython 3.11: standard library .pyc", lambda n: n.startswith("usr/lib/python3.11/") and n.endswith(".pyc")),
    ("CPython 3.11: standard library", lambda n: n.startswith("usr/lib/python3.11/")),
    ("shared libraries (glibc, OpenSSL, libstdc++, SQLite...)", lambda n: n.startswith(("usr/lib/x86_64-linux-gnu/", "usr/lib64/"))),
    ("bash", lambda n: n == "usr/bin/bash"),
    ("tzdata, CA certificates, licenses, users, other", lambda n: True),
]


def mb(n):
    return f"{n / 1e6:,.1f} MB"


def gb(n):
    return f"{n / 1e9:,.1f} GB"


def main():
    if len(sys.argv) > 1:
        archive = Path(sys.argv[1])
    else:
        found = sorted((REPO / "target/image").glob("oxray-*-oci.tar"))
        if not found:
            sys.exit("no image in target/image: run make image")
        archive = found[-1]
    parts = {name: 0 for name, _ in PARTS}
    layers = []
    with tarfile.open(archive) as tar:
        index = json.loads(tar.extractfile("index.json").read())
        ref = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        manifest = json.loads(tar.extractfile("blobs/sha256/" + index["manifests"][0]["digest"][7:]).read())
        for desc in manifest["layers"]:
            gz = tar.extractfile("blobs/sha256/" + desc["digest"][7:]).read()
            data = gzip.decompress(gz)
            layers.append((len(data), len(gz)))
            with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                for m in layer:
                    if m.isfile():
                        parts[next(name for name, match in PARTS if match(m.name))] += m.size
    size, compressed = sum(s for s, _ in layers), sum(c for _, c in layers)
    build = json.loads(archive.with_name(archive.name.replace("-oci.tar", "-build.json")).read_text())
    wheel = Path(build["inputs"]["wheel"]["path"])

    print(f"{ref}  ({archive.name})")
    print(f"{'image':44} {'uncompressed':>13} {'compressed':>11}  source")
    print(f"{'oxray':44} {mb(size):>13} {mb(compressed):>11}  measured: layer tars, gzip blobs")
    for i, (s, c) in enumerate(layers):
        print(f"{'  layer ' + str(i + 1) + (': python' if i == 0 else ': oxray'):44} {mb(s):>13} {mb(c):>11}")
    for name, published in RAY:
        print(f"{name:44} {gb(published):>13} {'':>11}  published, not measured here ({published / size:.0f}x)")
    print(f"target: under {mb(TARGET)} uncompressed: {'met' if size < TARGET else 'MISSED'}")

    print(f"\n{'what the image holds (file sizes)':58} {'size':>10}")
    for name, n in parts.items():
        print(f"{name:58} {mb(n):>10}")
    print(f"{'total':58} {mb(sum(parts.values())):>10}")
    if wheel.is_file():
        print(f"(the wheel it was built from: {wheel.name}, {mb(wheel.stat().st_size)}; its binary is the one above)")

    if shutil.which("podman"):
        done = subprocess.run(["podman", "image", "inspect", "--format", "{{.Size}}", ref], capture_output=True, text=True)
        if done.returncode == 0:
            print(f"podman image inspect: {mb(int(done.stdout.strip()))}")
    return 0 if size < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
