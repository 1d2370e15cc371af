"""TLS between hosts in network namespaces (`netns`): a head and a worker host, each with
its own certificate for its address, signed by one authority. Tasks, actors and objects
cross the hosts inside TLS; Ray's job CLI and oxray's reach the dashboard over https;
plain clients and clients of another authority are refused."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import OXRAY_BIN
from netns import Network, cluster, cross_host_work

NET = Network("oxtl", "10.203.0", ["h", "a"])
RAY_CLI = str(Path(sys.executable).parent / "ray")


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def authority(folder: Path, hosts):
    """A CA in `folder`, and for each host name, address: a certificate naming the address
    (and loopback) with its key. Returns the folder."""
    folder.mkdir(parents=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test-ca",
            cwd=folder)
    for name, address in hosts.items():
        (folder / f"{name}.ext").write_text(f"subjectAltName=IP:{address},IP:127.0.0.1\n")
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=folder)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=folder)
    return folder


def tls_env(certs: Path, name):
    return {"OXRAY_TLS_CERT": str(certs / f"{name}.crt"), "OXRAY_TLS_KEY": str(certs / f"{name}.key"),
            "OXRAY_TLS_CA": str(certs / "ca.crt")}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("making certificates needs the openssl command")
    root = tmp_path_factory.mktemp("tls")
    certs = authority(root / "certs", NET.address)
    with cluster(NET, root, "--num-cpus", "0", "--dashboard-host", "0.0.0.0", env=tls_env(certs, "h")) as started:
        started.join("a", "--num-cpus", "2", env=tls_env(certs, "a"))
        yield dict(started.hosts, certs=certs, token=started.token)


def test_tasks_actors_and_objects_cross_hosts_inside_tls(hosts):
    work = cross_host_work(hosts["h"], f"{NET.address['h']}:6379")
    assert work == ["oxtl-a", 8 << 20, ["oxtl-a", 55]]


def test_ray_job_cli_and_oxray_submit_over_https(hosts):
    if not os.access(RAY_CLI, os.X_OK):
        pytest.skip("Ray's CLI is not installed in this venv")
    a, certs = hosts["a"], hosts["certs"]
    url = f"https://{NET.address['h']}:8265"
    env = dict(a.env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=hosts["token"], RAY_USAGE_STATS_ENABLED="0")
    ray = subprocess.run(a._argv([RAY_CLI, "job", "submit", "--address", url, "--verify", str(certs / "ca.crt"),
                                  "--", "python", "-c", "print(40 + 2)"]),
                         env=env, capture_output=True, text=True, timeout=120)
    assert ray.returncode == 0 and "succeeded" in ray.stdout + ray.stderr, ray
    assert "\n42\n" in ray.stdout, ray
    # oxray's own CLI trusts the authority named by OXRAY_TLS_CA.
    ours = a.oxray("job", "submit", "--address", url, "--", "sh", "-c", "echo over-https")
    assert "over-https" in ours.stdout, ours
    # On the head's machine, clients trust the authority the cluster was started with.
    h = hosts["h"]
    bare = {k: v for k, v in h.env.items() if not k.startswith("OXRAY_TLS_")}
    here = subprocess.run(h._argv([OXRAY_BIN, "job", "submit", "--", "echo", "from-the-head"]), env=bare,
                          capture_output=True, text=True, timeout=120)
    assert here.returncode == 0 and "from-the-head" in here.stdout, here
    python = ("from oxray.job_submission import JobSubmissionClient as C; c = C(); "
              "print(c.get_address(), c.get_version() if hasattr(c, 'get_version') else len(c.list_jobs()))")
    listed = subprocess.run(h._argv([sys.executable, "-c", python]), env=bare, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0 and listed.stdout.startswith("https://"), listed


def test_plain_clients_and_strangers_are_refused(hosts, tmp_path):
    a = hosts["a"]
    # The dashboard speaks no plain HTTP, and a client that does not trust the authority
    # refuses it.
    status, why = a.get(f"http://{NET.address['h']}:8265/api/version")
    assert status is None, why
    status, why = a.get(f"https://{NET.address['h']}:8265/api/version")
    assert status is None and "CERTIFICATE_VERIFY_FAILED" in why, why
    # A driver with no certificate, or one of another authority, cannot reach the head.
    stranger = authority(tmp_path / "other", {"a": NET.address["a"]})
    connect = f"import oxray; oxray.init(address='{NET.address['h']}:6379')"
    for env in ({}, tls_env(stranger, "a")):
        plain = {k: v for k, v in a.env.items() if not k.startswith("OXRAY_TLS_")}
        out = subprocess.run(a._argv([sys.executable, "-c", connect]), env=dict(plain, **env),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode != 0, out
        assert "cannot reach the head" in out.stderr or "cannot talk to the head" in out.stderr, out.stderr[-2000:]
        print(out.stderr.strip().splitlines()[-1])


def test_tls_flags_go_together_and_are_checked_before_anything_starts(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OXRAY_", "RAY_"))}
    env.update(OXRAY_HOME=str(tmp_path / "home"), OXRAY_TEMP_DIR=str(tmp_path / "sessions"))
    half = subprocess.run([OXRAY_BIN, "start", "--head", "--port", "0", "--tls-cert", "x.crt"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert half.returncode != 0 and "go together" in half.stderr, half
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    bad = [str(tmp_path / "bad.pem")] * 3
    wrong = subprocess.run([OXRAY_BIN, "start", "--head", "--port", "0", "--tls-cert", bad[0], "--tls-key", bad[1],
                            "--tls-ca", bad[2]], env=env, capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0 and "bad.pem" in wrong.stderr, wrong
    assert not (tmp_path / "home" / "procs").exists() or not any((tmp_path / "home" / "procs").iterdir())
