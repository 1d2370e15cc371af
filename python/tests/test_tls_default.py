"""TLS by default between hosts in network namespaces (`netns`): a cluster started with no
TLS flags on addresses other machines reach encrypts every connection between them, with an
authority derived from the cluster token. Work crosses the hosts; the control port shows
that authority's certificate; a process with another token, or one that turned TLS off, is
refused; the dashboard stays plain http for Ray's job CLI, and Ray's tools still find it
through the control port."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import OXRAY_BIN
from netns import Network, cluster, cross_host_work

NET = Network("oxtd", "10.205.0", ["h", "a", "b"])
HEAD = f"{NET.address['h']}:6379"
RAY_CLI = str(Path(sys.executable).parent / "ray")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    root = tmp_path_factory.mktemp("tls-default")
    with cluster(NET, root, "--num-cpus", "0", "--dashboard-host", "0.0.0.0") as started:
        started.join("a", "--num-cpus", "2")
        started.host("b")
        yield dict(started.hosts, token=started.token, banner=started.banner)


def test_work_crosses_hosts_and_the_control_port_shows_the_token_s_authority(hosts):
    h, a = hosts["h"], hosts["a"]
    cluster = json.loads(Path(h.env["OXRAY_HOME"], "current_cluster.json").read_text())
    assert cluster["tls"] == "auto", cluster
    banner = hosts["banner"]
    assert "TLS: on between machines, with an authority derived from the cluster token" in banner.stdout, banner
    assert "listen on 0.0.0.0 over plain http" in banner.stderr, banner
    assert "without TLS" not in banner.stderr and "characters" not in banner.stderr, banner
    shown = a.run("openssl", "s_client", "-connect", HEAD, check=False, timeout=30)
    assert "oxray cluster authority" in shown.stdout + shown.stderr, shown
    # A driver on the head's host reaches a's workers over TCP, and one on a reaches the head.
    for driver in (h, a):
        assert cross_host_work(driver, HEAD) == ["oxtd-a", 8 << 20, ["oxtd-a", 55]], driver.name


def test_other_tokens_and_plain_processes_are_refused(hosts):
    a, b = hosts["a"], hosts["b"]
    connect = f"import oxray; oxray.init(address='{HEAD}')"
    cases = {"another token": ({"OXRAY_AUTH_TOKEN": "0" * 64}, "is this the head's token"),
             "TLS off": ({"OXRAY_TLS": "off"}, "does not serve oxray's calls over a plain connection")}
    for what, (env, says) in cases.items():
        out = subprocess.run(a._argv([sys.executable, "-c", connect]), env=dict(a.env, **env),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode != 0, (what, out)
        last = out.stderr.strip().splitlines()[-1]
        assert says in last, (what, out.stderr[-2000:])
    # A node that turned TLS off cannot join.
    joined = b.run(OXRAY_BIN, "start", "--address", HEAD, "--no-tls", "--node-ip-address", b.address,
                   "--join-timeout-s", "3", check=False, timeout=60)
    assert joined.returncode != 0 and "does not serve oxray's calls over a plain connection" in joined.stderr, joined
    bad = b.run(OXRAY_BIN, "start", "--address", HEAD, "--no-tls", "--tls-ca", "ca.crt", check=False)
    assert bad.returncode == 2 and "cannot be used with" in bad.stderr, bad


def test_ray_job_cli_reaches_the_plain_http_dashboard(hosts):
    if not os.access(RAY_CLI, os.X_OK):
        pytest.skip("Ray's CLI is not installed in this venv")
    a = hosts["a"]
    env = dict(a.env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=hosts["token"], RAY_USAGE_STATS_ENABLED="0")
    ray = subprocess.run(a._argv([RAY_CLI, "job", "submit", "--address", f"http://{NET.address['h']}:8265",
                                  "--", "python", "-c", "print(40 + 2)"]),
                         env=env, capture_output=True, text=True, timeout=120)
    assert ray.returncode == 0 and "\n42\n" in ray.stdout, ray
    # `ray logs` asks the control port (Ray's GCS) where the dashboard is, in plain gRPC:
    # the head answers that much outside TLS, and nothing of oxray's own.
    logs = subprocess.run(a._argv([RAY_CLI, "logs", "cluster", "--node-ip", NET.address["a"], "--address", HEAD]),
                          env=env, capture_output=True, text=True, timeout=120)
    assert logs.returncode == 0 and "agent" in logs.stdout, logs
