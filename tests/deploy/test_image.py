"""The container image that `make image` writes (deploy/image/build.py). From the OCI archive
alone: its config, its layers (owners, times, modes, users), its size, and a second build from
the same inputs giving the same digest. With podman: the binary, Python and bash as uid 1000,
a read-only root, then a head in one container, a worker joining it from another, jobs
submitted from outside through the published port by the host's oxray, and SIGTERM stopping
both cleanly.

Run: make test-image, or after make image:
    OXRAY_IMAGE=target/image/oxray-0.1.0-oci.tar .venv/bin/python -m pytest tests/deploy/test_image.py
OXRAY_IMAGE names the archive; without it the file is skipped, so that `make test-deploy`
(which collects every file in tests/deploy) leaves it to make test-image. OXRAY_BIN: the host's
oxray [default: the portable build, else target/release/oxray, else target/debug/oxray]. The container tests run with
podman, or with a working docker when there is no podman, and are skipped when neither exists.
"""

import gzip
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

if not os.environ.get("OXRAY_IMAGE"):
    pytest.skip("OXRAY_IMAGE is not set: make test-image runs these tests", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
ARCHIVE = Path(os.environ["OXRAY_IMAGE"]).resolve()
BUILD = REPO / "deploy" / "image" / "build.py"
LIMIT = 100_000_000
PORTS = {"6379/tcp", "8265/tcp", "10001/tcp", "8000/tcp"}


def host_oxray():
    portable = REPO / f"target/portable/{os.uname().machine}-unknown-linux-gnu/release/oxray"
    for candidate in (os.environ.get("OXRAY_BIN"), portable, REPO / "target/release/oxray", REPO / "target/debug/oxray"):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("no oxray binary on the host: set OXRAY_BIN or run make release")


# ---- the archive -----------------------------------------------------------------------------

class Image:
    """The archive's index, manifest, config and every layer entry, read once."""

    def __init__(self, path):
        if not path.is_file():
            pytest.fail(f"no image archive at {path}: run make image")
        with tarfile.open(path) as tar:
            self.archive_names = tar.getnames()

            def blob(digest):
                return tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1]).read()

            self.index = json.loads(tar.extractfile("index.json").read())
            (entry,) = self.index["manifests"]
            self.ref = entry["annotations"]["org.opencontainers.image.ref.name"]
            self.manifest_digest = entry["digest"]
            raw = blob(entry["digest"])
            assert "sha256:" + hashlib.sha256(raw).hexdigest() == entry["digest"]
            self.manifest = json.loads(raw)
            raw = blob(self.manifest["config"]["digest"])
            assert "sha256:" + hashlib.sha256(raw).hexdigest() == self.manifest["config"]["digest"]
            self.config = json.loads(raw)
            self.docker_manifest = json.loads(tar.extractfile("manifest.json").read())
            self.layers = []
            for desc, diff_id in zip(self.manifest["layers"], self.config["rootfs"]["diff_ids"]):
                gz = blob(desc["digest"])
                assert "sha256:" + hashlib.sha256(gz).hexdigest() == desc["digest"]
                data = gzip.decompress(gz)
                assert "sha256:" + hashlib.sha256(data).hexdigest() == diff_id
                with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                    members = layer.getmembers()
                    small = {m.name: layer.extractfile(m).read() for m in members
                             if m.isfile() and m.name.startswith("etc/")}
                self.layers.append({"size": len(data), "compressed": len(gz), "members": members, "files": small})

    @property
    def size(self):
        return sum(layer["size"] for layer in self.layers)

    @property
    def compressed(self):
        return sum(layer["compressed"] for layer in self.layers)

    def entries(self):
        return {m.name: m for layer in self.layers for m in layer["members"]}

    def file(self, name):
        for layer in self.layers:
            if name in layer["files"]:
                return layer["files"][name].decode()
        raise KeyError(name)


@pytest.fixture(scope="module")
def image():
    return Image(ARCHIVE)


@pytest.fixture(scope="module")
def version():
    return json.loads(ARCHIVE.with_name(ARCHIVE.name.replace("-oci.tar", "-build.json")).read_text())["version"]


def test_the_config_runs_oxray_as_a_non_root_user(image, version):
    config = image.config["config"]
    assert config["User"] == "1000:1000"
    assert config["WorkingDir"] == "/home/oxray"
    assert config["Entrypoint"] == ["oxray"]
    assert config["Cmd"] == ["start", "--head", "--block", "--dashboard-host", "0.0.0.0"]
    assert set(config["ExposedPorts"]) == PORTS
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["HOME"] == "/home/oxray" and env["LANG"] == "C.UTF-8"
    assert "/usr/bin" in env["PATH"].split(":")
    # The image ships .pyc files, and Python should use them.
    assert "PYTHONDONTWRITEBYTECODE" not in env
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "oxray"
    assert labels["org.opencontainers.image.version"] == version
    assert image.config["architecture"] == "amd64" and image.config["os"] == "linux"
    assert image.ref == f"docker.io/oxray/oxray:{version}"
    assert image.docker_manifest[0]["RepoTags"] == [f"oxray/oxray:{version}"]
    assert sorted(image.archive_names) == image.archive_names


def test_the_layers_are_normalized_and_hold_what_the_image_needs(image):
    for layer in image.layers:
        names = [m.name for m in layer["members"]]
        assert names == sorted(names), "layer entries are not sorted"
        for m in layer["members"]:
            assert m.mtime == 0, m.name
            assert not m.name.startswith("/") and ".." not in m.name.split("/"), m.name
            assert (m.uid, m.gid) == ((1000, 1000) if m.name == "home/oxray" else (0, 0)), m.name
            assert not m.mode & 0o6000, f"{m.name} is setuid or setgid"
    entries = image.entries()
    assert entries["tmp"].mode == 0o1777 and entries["home/oxray"].isdir()
    binary = entries["usr/bin/oxray"]
    assert binary.isfile() and binary.mode == 0o755
    for name in ("usr/lib/python3/dist-packages/oxray/_bin/oxray", "usr/bin/ray", "usr/bin/serve"):
        assert entries[name].islnk() and entries[name].linkname == "usr/bin/oxray", name
    for name in ("usr/bin/python3.11", "usr/bin/bash", "etc/ssl/certs/ca-certificates.crt",
                 "usr/lib/python3/dist-packages/oxray/__init__.py",
                 "usr/lib/python3/dist-packages/oxray/__pycache__/__init__.cpython-311.pyc",
                 "usr/lib/python3.11/__pycache__/os.cpython-311.pyc", "usr/lib/os-release",
                 "var/lib/dpkg/status.d/python3.11-minimal", "usr/share/doc/libssl3/copyright"):
        assert entries[name].isfile(), name
    assert entries["usr/bin/python3"].linkname == "python3.11"
    assert entries["usr/bin/python"].linkname == "python3"
    assert entries["bin"].issym() and entries["lib64"].issym()
    site = {n.split("/")[4].split("-")[0] for n in entries if n.startswith("usr/lib/python3/dist-packages/")}
    assert {"oxray", "websockets", "cloudpickle", "oxray_as_ray.pth", "oxray_ray_name.py"} <= site
    assert not [n for n in entries if n.startswith(("usr/share/man/", "usr/share/locale/"))]
    assert "oxray:x:1000:1000:oxray:/home/oxray:/bin/bash" in image.file("etc/passwd").splitlines()
    assert "oxray:x:1000:" in image.file("etc/group").splitlines()
    # The second layer is only oxray, so that a new release leaves the first one as it was.
    oxray_files = {m.name for m in image.layers[1]["members"] if not m.isdir()}
    assert {"usr/bin/oxray", "usr/bin/ray", "usr/bin/serve"} <= oxray_files
    site = "usr/lib/python3/dist-packages/"
    assert all(n.startswith(("usr/bin/", site + "oxray", site + "__pycache__/oxray_ray_name.")) for n in oxray_files)
    assert not [m.name for m in image.layers[0]["members"] if "oxray_ray_name" in m.name]


def test_the_image_is_under_100_mb(image):
    layers = ", ".join(f"{layer['size'] / 1e6:.1f}" for layer in image.layers)
    print(f"\nimage: {image.size / 1e6:.1f} MB uncompressed, {image.compressed / 1e6:.1f} MB compressed "
          f"(layers: {layers} MB)")
    assert image.size < LIMIT, f"{image.size / 1e6:.1f} MB uncompressed, over {LIMIT / 1e6:.0f} MB"


def test_a_second_build_from_the_same_inputs_gives_the_same_digest(image, tmp_path):
    report = json.loads(ARCHIVE.with_name(ARCHIVE.name.replace("-oci.tar", "-build.json")).read_text())
    assert report["manifest"] == image.manifest_digest
    inputs = report["inputs"]
    args = ["--wheel", inputs["wheel"]["path"], "--out", str(tmp_path), "--load", "no"]
    for kind in ("wheel", "binary"):
        given = inputs[kind]
        if given is None:
            continue
        if not Path(given["path"]).is_file() or hashlib.sha256(Path(given["path"]).read_bytes()).hexdigest() != given["sha256"]:
            pytest.fail(f"{given['path']} changed since {ARCHIVE.name} was built: run make image again")
        if kind == "binary":
            args += ["--binary", given["path"]]
    if not inputs["strip"]:
        args.append("--no-strip")
    if inputs["source"]:
        args += ["--source", inputs["source"]]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(inputs["source_date_epoch"])}
    done = subprocess.run([sys.executable, str(BUILD), *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    again = json.loads((tmp_path / f"oxray-{report['version']}-build.json").read_text())
    assert again["inputs"]["debs"] == inputs["debs"], "apt's candidates changed between the builds"
    assert again["manifest"] == report["manifest"]
    assert (tmp_path / ARCHIVE.name).read_bytes() == ARCHIVE.read_bytes()


@pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed (make setup installs it)")
def test_skopeo_reads_the_archive_as_oci_and_as_docker(image):
    for transport in ("oci-archive", "docker-archive"):
        done = subprocess.run(["skopeo", "inspect", "--config", f"{transport}:{ARCHIVE}"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["config"] == image.config["config"], transport


# ---- in containers ---------------------------------------------------------------------------

def find_engine():
    if shutil.which("podman"):
        return "podman"
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return "docker"
    return None


@pytest.fixture(scope="module")
def engine(image):
    """The container engine, with the archive's image loaded into it."""
    tool = find_engine()
    if tool is None:
        pytest.skip("neither podman nor a working docker is installed (make setup installs podman)")
    want = image.manifest["config"]["digest"].split(":", 1)[1]
    have = subprocess.run([tool, "image", "inspect", "--format", "{{.Id}}", image.ref], capture_output=True, text=True)
    if want not in have.stdout:
        done = subprocess.run([tool, "load", "-i", str(ARCHIVE)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    return tool


def run(engine, image, *args, timeout=60, options=()):
    return subprocess.run([engine, "run", "--rm", *options, image.ref, *args], capture_output=True, text=True,
                          timeout=timeout)


def test_the_binary_runs(engine, image, version):
    done = run(engine, image, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"oxray {version}"
    # Ray's names: the `ray` command and `import ray`, as KubeRay's pods and Ray's scripts use them.
    done = run(engine, image, "-c", "ray --version && python3 -c 'import ray; print(ray.__name__, ray.__version__)'",
               options=("--entrypoint", "bash"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [f"ray, version 2.60.0 (oxray {version})", "oxray 2.60.0"]


def test_python_runs_as_uid_1000_from_precompiled_modules(engine, image):
    code = ("import os, ssl, sqlite3, ctypes, lzma, bz2, uuid, zoneinfo, asyncio, oxray, websockets, cloudpickle; "
            "print(os.getuid(), os.getgid(), os.getcwd()); "
            "print(ssl.create_default_context().cert_store_stats()['x509_ca']); "
            "print(zoneinfo.ZoneInfo('Europe/Paris').key)")
    done = run(engine, image, "-v", "-c", code, options=("--entrypoint", "python3"))
    assert done.returncode == 0, done.stderr[-3000:]
    uid_gid_cwd, cas, zone = done.stdout.split("\n")[:3]
    assert uid_gid_cwd == "1000 1000 /home/oxray"
    assert int(cas) > 100, "the CA bundle is empty"
    assert zone == "Europe/Paris"
    # -v reports every module whose .pyc is missing or stale, and every failed write of one.
    assert "could not create" not in done.stderr and "stale" not in done.stderr, \
        [line for line in done.stderr.splitlines() if "could not create" in line or "stale" in line][:5]
    assert re.search(r"dist-packages/oxray/__pycache__/__init__\.cpython-311\.pyc matches", done.stderr)


def test_bash_login_shells_and_a_read_only_root_work(engine, image, version):
    done = run(engine, image, "-lc", "ulimit -n >/dev/null && oxray --version && python -c 'import oxray'",
               options=("--read-only", "--entrypoint", "bash"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"oxray {version}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, timeout=60, context=lambda: ""):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}\n{context()}")
        time.sleep(0.5)


def test_a_head_in_a_container_runs_jobs_submitted_from_outside(engine, image):
    oxray = host_oxray()
    token = secrets.token_hex(16)
    dashboard, control = free_port(), free_port()
    tag = f"{os.getpid()}-{secrets.token_hex(3)}"
    head, worker = f"oxray-test-head-{tag}", f"oxray-test-worker-{tag}"
    # The head's control port is published on this machine's loopback: a client reaching a
    # head on TLS there says so (it cannot tell from the address).
    env = {**os.environ, "OXRAY_AUTH_TOKEN": token, "OXRAY_TLS": "auto"}
    env.pop("OXRAY_ADDRESS", None)
    address = f"http://127.0.0.1:{dashboard}"

    def host(*args, timeout=60):
        return subprocess.run([oxray, *args], capture_output=True, text=True, env=env, timeout=timeout)

    def logs(name):
        return subprocess.run([engine, "logs", name], capture_output=True, text=True).stdout[-3000:]

    def alive_nodes():
        done = host("status", "--address", f"127.0.0.1:{control}", timeout=20)
        if done.returncode != 0:
            return 0
        alive = done.stdout.split("Alive:", 1)[-1].split("Dead:", 1)[0]
        return len(re.findall(r"node_[0-9a-f]+", alive))

    def finished(job):
        def check():
            done = host("job", "status", "--address", address, job)
            text = done.stdout.lower()
            if re.search(r"\b(failed|stopped)\b", text):
                pytest.fail(f"job {job}: {done.stdout}\n{host('job', 'logs', '--address', address, job).stdout}")
            return "succeeded" in text
        wait_for(f"job {job} to succeed", check, timeout=120)
        return host("job", "logs", "--address", address, job).stdout

    try:
        started = subprocess.run(
            [engine, "run", "-d", "--name", head, "-p", f"127.0.0.1:{dashboard}:8265", "-p", f"127.0.0.1:{control}:6379",
             "-e", f"OXRAY_AUTH_TOKEN={token}", image.ref,
             "start", "--head", "--block", "--dashboard-host", "0.0.0.0", "--num-cpus", "1"],
            capture_output=True, text=True, timeout=60)
        assert started.returncode == 0, started.stderr
        wait_for("the head to answer through the published port", lambda: alive_nodes() == 1,
                 context=lambda: logs(head))

        done = host("job", "submit", "--address", address, "--no-wait", "--submission-id", f"image-{tag}",
                    "--", "python", "-c", "print('hello from the image')")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "hello from the image" in finished(f"image-{tag}")

        # A worker in a second container joins the head by its address on the container network.
        head_ip = subprocess.run([engine, "inspect", "--format", "{{.NetworkSettings.IPAddress}}", head],
                                 capture_output=True, text=True).stdout.strip()
        assert head_ip, logs(head)
        started = subprocess.run(
            [engine, "run", "-d", "--name", worker, "-e", f"OXRAY_AUTH_TOKEN={token}", image.ref,
             "start", "--address", f"{head_ip}:6379", "--block", "--num-cpus", "1"],
            capture_output=True, text=True, timeout=60)
        assert started.returncode == 0, started.stderr
        wait_for("the worker to join", lambda: alive_nodes() == 2, context=lambda: logs(worker))
        code = (
            "import socket, oxray\n"
            "from oxray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On\n"
            "oxray.init()\n"
            "@oxray.remote\n"
            "def where(): return socket.gethostname()\n"
            "nodes = [n['NodeID'] for n in oxray.nodes() if n['Alive']]\n"
            "print('hosts', sorted(oxray.get([where.options(scheduling_strategy=On(n, soft=False)).remote() for n in nodes])))\n"
        )
        done = host("job", "submit", "--address", address, "--no-wait", "--submission-id", f"image-{tag}-2",
                    "--", "python", "-c", code)
        assert done.returncode == 0, done.stdout + done.stderr
        output = finished(f"image-{tag}-2")
        hostnames = sorted(subprocess.run([engine, "inspect", "--format", "{{.Config.Hostname}}", name],
                                          capture_output=True, text=True).stdout.strip() for name in (head, worker))
        assert f"hosts {hostnames}" in output, output

        # --block: SIGTERM stops the node and its processes, well before the engine's SIGKILL.
        began = time.monotonic()
        stopped = subprocess.run([engine, "stop", "-t", "30", worker, head], capture_output=True, text=True, timeout=90)
        took = time.monotonic() - began
        assert stopped.returncode == 0, stopped.stderr
        assert took < 25, f"stopping took {took:.1f} s: SIGTERM was not enough"
        for name in (head, worker):
            code = subprocess.run([engine, "inspect", "--format", "{{.State.ExitCode}}", name],
                                  capture_output=True, text=True).stdout.strip()
            assert code == "0", f"{name} exited with {code}:\n{logs(name)}"
    finally:
        # One at a time: given a name it does not know, podman removes none of the others.
        quick = ["-t", "0"] if engine == "podman" else []
        for name in (worker, head):
            subprocess.run([engine, "rm", "-f", *quick, name], capture_output=True)
    left = subprocess.run([engine, "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout.split()
    assert head not in left and worker not in left
