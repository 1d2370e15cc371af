"""The offline bundle (`make dist`): its contents, an install with no network into a fresh
prefix and venv, the glibc floor of what it ships, the wheel's manylinux tag, bad arguments."""

import glob
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FLOOR = (REPO / "deploy/dist/GLIBC_FLOOR").read_text().strip()
TOOLS_PY = REPO / ".tools/venv/bin/python"


def bundle():
    found = sorted(glob.glob(str(REPO / "target/dist/oxray-*-linux-*.tar.gz")))
    if not found:
        pytest.fail("no bundle in target/dist: run `make dist` (make test-dist does)")
    return Path(found[-1])


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle")
    with tarfile.open(bundle()) as tar:
        tar.extractall(root, filter="data")
    (top,) = list(root.iterdir())
    return top


def test_the_bundle_holds_the_binary_the_wheels_and_the_installer(unpacked):
    assert re.fullmatch(r"oxray-\d+\.\d+\.\d+-linux-x86_64", unpacked.name)
    assert os.access(unpacked / "install.sh", os.X_OK)
    names = [p.name for p in (unpacked / "wheels").iterdir()]
    assert any(re.match(r"oxray-.*-cp39-abi3-manylinux.*_x86_64.*\.whl", n) for n in names), names
    assert any(n.startswith("websockets-") for n in names) and any(n.startswith("cloudpickle-") for n in names)
    # The dependency wheels cover every CPython the abi3 wheel supports.
    for v in ("39", "310", "311", "312", "313"):
        assert any(n.startswith("websockets-") and (f"cp{v}" in n or "py3-none" in n) for n in names), (v, names)


def test_an_offline_install_gives_a_working_binary_and_package(unpacked, tmp_path):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root for a network namespace with no network")
    prefix, venv = tmp_path / "prefix", tmp_path / "venv"
    done = subprocess.run(["unshare", "-n", str(unpacked / "install.sh"), "--prefix", str(prefix), "--venv", str(venv)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    version = subprocess.run([str(prefix / "bin/oxray"), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("oxray ")
    probe = "import oxray, websockets, cloudpickle; print(oxray.__file__)"
    where = subprocess.run([str(venv / "bin/python"), "-c", probe], capture_output=True, text=True, check=True)
    assert str(venv) in where.stdout
    # Ray's names, with no Ray installed: the commands (the bundle's and the wheel's) and `import ray`.
    for ray in (prefix / "bin/ray", venv / "bin/ray"):
        said = subprocess.run([str(ray), "--version"], capture_output=True, text=True, check=True)
        assert said.stdout.startswith("ray, version 2.60.0 (oxray "), said.stdout
    probe = "import importlib.metadata, ray; print(ray.__name__, ray.__version__, importlib.metadata.version('ray'))"
    named = subprocess.run([str(venv / "bin/python"), "-c", probe], capture_output=True, text=True, check=True)
    assert named.stdout.split() == ["oxray", "2.60.0", "2.60.0"]


def test_bad_arguments_get_a_message_and_an_exit_code(unpacked):
    done = subprocess.run([str(unpacked / "install.sh"), "--bogus"], capture_output=True, text=True)
    assert done.returncode != 0 and "unknown argument: --bogus" in done.stderr
    done = subprocess.run([str(unpacked / "install.sh"), "--prefix"], capture_output=True, text=True)
    assert done.returncode != 0 and "needs a directory" in done.stderr


def test_what_ships_needs_no_newer_glibc_than_documented(unpacked, tmp_path):
    wheel = next((unpacked / "wheels").glob("oxray-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extract("oxray/_native.abi3.so", tmp_path)
    files = [str(unpacked / "bin/oxray"), str(tmp_path / "oxray/_native.abi3.so")]
    done = subprocess.run([sys.executable, str(REPO / "deploy/dist/glibc_floor.py"), "--max", FLOOR, *files],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"--max {FLOOR}" not in done.stderr


def test_the_wheel_is_manylinux_as_auditwheel_sees_it(unpacked):
    if not TOOLS_PY.exists():
        pytest.fail("auditwheel lives in .tools/venv: run `make tools` (make test-dist does)")
    wheel = next((unpacked / "wheels").glob("oxray-*.whl"))
    done = subprocess.run([str(TOOLS_PY), "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    tag = f"manylinux_{FLOOR.replace('.', '_')}"
    assert f'consistent with the following platform tag: "{tag}_' in text, done.stdout
